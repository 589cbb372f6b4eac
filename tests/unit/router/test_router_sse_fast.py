"""The typed fast path for stream events (``Transcript.add_event``) never judges differently.

For every event it takes, the transcript must be exactly what the checked path
(``orjson.loads`` + ``Transcript.add``) builds (compared as the arm record it fills: the fast
path reads integer logprobs as floats, the record holds floats either way); an event the checked path refuses
(``BadChunk``) must never be taken. Checked on vLLM-shaped streams of the fake upstream and
on random mutations of a vLLM chunk (hypothesis): any value anywhere replaced by any JSON.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.fake_upstream import Knobs, _Answer

from abserve.base.event_stream import SSEParser
from abserve.model.records import ArmOutcome
from abserve.router.sse import Transcript

CHUNK: dict[str, Any] = {
    "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
    "choices": [{"index": 0, "delta": {"content": "▁a"}, "message": None, "text": None,
                 "finish_reason": None,
                 "token_ids": [17], "stop_reason": None,
                 "logprobs": {"content": [{"token": "▁a", "logprob": -0.25, "bytes": [97],
                                           "top_logprobs": [{"token": "▁a", "logprob": -0.25},
                                                            {"token": "▁b", "logprob": -2}]}]}}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6,
              "prompt_tokens_details": None},
}
KEYS = st.sampled_from(["id", "choices", "usage", "error", "index", "delta", "message", "text",
                         "content", "finish_reason", "token_ids", "logprobs", "top_logprobs",
                         "token", "logprob", "tokens", "token_logprobs"]) | st.text(max_size=4)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(KEYS, inner, max_size=3), max_leaves=6)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out += _paths(child, (*prefix, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value = copy.deepcopy(value)
    holder = value
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = new
    return value


def _both(payload: bytes) -> tuple[bool, Transcript, Transcript | None]:
    """(taken by the fast path, its transcript, the checked path's or None if refused)."""
    fast, checked = Transcript(), Transcript()
    taken = fast.add_event(payload, 0.5)
    try:
        body = orjson.loads(payload)
        if not isinstance(body, dict) or ("error" in body and body["error"] is not None):
            return taken, fast, None
        checked.add(body, 0.5)
    except Exception:  # BadChunk, or any error: the arm call records a bad_response
        return taken, fast, None
    return taken, fast, checked


def _record(transcript: Transcript) -> ArmOutcome | str:
    """What the arm's record gets from a transcript (or the error filling it raises)."""
    outcome = ArmOutcome(arm="a")
    try:
        transcript.fill(outcome)
    except Exception as exc:  # the caller records a bad_response: the same either way
        return type(exc).__name__
    return outcome


@pytest.mark.parametrize("body", [
    {"logprobs": True, "top_logprobs": 5, "return_token_ids": True, "stream": True,
     "stream_options": {"include_usage": True}},
    {"stream": True},
    {"logprobs": True, "top_logprobs": 1, "stream": True},
])
def test_vllm_shaped_streams_take_the_fast_path_with_the_same_transcript(body: dict[str, Any]) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], **body}
    stream = _Answer(body, True, Knobs(n_tokens=12)).chunks()
    fast, checked = Transcript(), Transcript()
    for data in stream:
        for payload in SSEParser().feed(data):
            assert fast.add_event(payload, 0.25)
            checked.add(orjson.loads(payload), 0.25)
    assert fast == checked
    a, b = ArmOutcome(arm="a"), ArmOutcome(arm="a")
    fast.fill(a)
    checked.fill(b)
    assert a == b
    assert len(a.token_ids) == 12 * bool(body.get("return_token_ids"))


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_a_mutated_chunk_is_judged_as_the_checked_path_judges_it(data: st.DataObject) -> None:
    chunk = CHUNK
    for _ in range(data.draw(st.integers(1, 3))):  # one to three values replaced anywhere
        chunk = _replace(chunk, data.draw(st.sampled_from(_paths(chunk))),
                         data.draw(JSON))
    taken, fast, checked = _both(orjson.dumps(chunk))
    if taken:
        assert checked is not None, f"fast path took a chunk the checked path refuses: {chunk}"
        assert _record(fast) == _record(checked)
    else:
        assert fast == Transcript()  # nothing kept from an event it did not take


@pytest.mark.parametrize("choice", [
    {"index": 0, "delta": {}, "message": {"content": "x"}},  # the checked path reads message
    {"index": 0, "delta": {"content": "y"}, "message": {"content": "x"}},
    {"index": 0.0, "delta": {"content": "y"}},  # 0.0 == 0 for the checked path
    {"index": 0, "delta": {"content": "y"}, "token_ids": 0},  # falsy: no ids
    {"index": 0, "delta": {"content": "y"}, "logprobs": {"tokens": ["y"], "token_logprobs": [-1]}},
])
def test_edge_shapes_are_left_to_the_checked_path_or_read_alike(choice: dict[str, Any]) -> None:
    taken, fast, checked = _both(orjson.dumps({"id": "c", "choices": [choice]}))
    assert checked is not None
    assert not taken or _record(fast) == _record(checked)
