"""The router's record path (logprobs kept as lists from the upstream's answer to the store
row, ``Transcript.record`` + ``rows.routed_row``) stores the very row the models did.

For generated upstream answers (chat and completions, streamed and whole, with and without
token ids, logprobs and top-k, ``null`` and integer logprobs, ids beyond int64, answers cut
short, failed arms, prompt logprobs from the probe), each arm is read as ``ArmCall`` reads it
(the typed fast path, else the checked way). The row the router stores must equal, byte for
byte, the row of the record reference-built from the same answers with per-position models,
packed by the packer the format was defined with (``tests/support/v2_packer.py``); the
record a sink asks for in full (``RoutedExchange.full``) must equal that record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support import v2_packer
from tests.support.records_factory import position

from abserve.base.event_stream import SSEParser
from abserve.model.records import ArmOutcome, Exchange, PositionLogprobs, TopLogprob
from abserve.model.token_lists import PositionLists, RoutedExchange
from abserve.router.sse import DONE, Transcript
from abserve.store.rows import record_row, routed_row

Token = tuple[str, int, float | int | None, list[tuple[str, float | int | None]]]

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=4)  # JSON: no lone surrogates
logprob_values = (st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-9, 0)
                  | st.just(-0.0))
token_ids = st.integers(0, 200_000) | st.integers(0, 2**63 - 1)
BEYOND_INT64 = 2**63  # an id the blob cannot hold: the arm stays all JSON


@dataclass
class Answer:
    """One arm's answer: its tokens, and how it is sent."""

    chat: bool
    stream: bool
    with_ids: bool
    logprobs: str  # "none" | "chosen" | "top"
    tokens: list[Token]
    per_chunk: int
    cut: int | None  # streamed events kept (the stream ended short); None: all

    def kept(self) -> list[Token]:
        if self.cut is None or not self.stream:
            return self.tokens
        return self.tokens[: self.cut * self.per_chunk]


@st.composite
def answers(draw: st.DrawFn, chat: bool) -> Answer:
    mode = draw(st.sampled_from(["none", "chosen", "top"]))
    k = draw(st.integers(1, 4)) if mode == "top" else 0
    tokens = []
    for _ in range(draw(st.integers(0, 6))):
        top = draw(st.lists(st.tuples(texts, logprob_values), min_size=k, max_size=k,
                            unique_by=None if chat else (lambda c: c[0])))  # completions: a dict
        tokens.append((draw(texts), draw(token_ids), draw(logprob_values), top))
    if tokens and draw(st.integers(0, 7)) == 0:
        tokens[-1] = (tokens[-1][0], BEYOND_INT64, *tokens[-1][2:])
    stream = draw(st.booleans())
    return Answer(chat, stream, draw(st.booleans()), mode, tokens, draw(st.integers(1, 3)),
                  draw(st.none() | st.integers(0, 3)) if stream else None)


def _logprobs(answer: Answer, group: list[Token]) -> dict[str, Any] | None:
    if answer.logprobs == "none":
        return None
    if answer.chat:
        return {"content": [{"token": t, "logprob": lp, "top_logprobs": [
            {"token": c, "logprob": v} for c, v in top]} for t, _, lp, top in group]}
    return {"tokens": [t for t, *_ in group], "token_logprobs": [lp for _, _, lp, _ in group],
            "top_logprobs": [dict(top) for *_, top in group] if answer.logprobs == "top" else None}


def _choice(answer: Answer, group: list[Token], finish: str | None) -> dict[str, Any]:
    text = "".join(t for t, *_ in group)
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish,
                              "logprobs": _logprobs(answer, group)}
    if answer.chat:
        choice["delta" if answer.stream else "message"] = {"content": text}
    else:
        choice["text"] = text
    if answer.with_ids:
        choice["token_ids"] = [i for _, i, *_ in group]
    return choice


def events(answer: Answer) -> list[bytes]:
    """What the upstream sends: SSE payloads when streamed, else the one JSON body."""
    usage = {"prompt_tokens": 3, "completion_tokens": len(answer.tokens), "total_tokens": 9}
    if not answer.stream:
        return [orjson.dumps({"id": "x", "choices": [_choice(answer, answer.tokens, "length")],
                              "usage": usage})]
    step = answer.per_chunk
    out = [orjson.dumps({"id": "x", "choices": [_choice(answer, answer.tokens[i:i + step], None)]})
           for i in range(0, len(answer.tokens), step)]
    out.append(orjson.dumps({"choices": [{"index": 0, "delta": {}, "text": "", "finish_reason": "length"}],
                             "usage": usage}))
    return out if answer.cut is None else out[: answer.cut]


def read(name: str, answer: Answer, failed: bool) -> tuple[ArmOutcome, PositionLists, Transcript]:
    """The arm's record as ``ArmCall`` makes it: outcome (output logprobs empty) and lists."""
    transcript = Transcript()
    for i, payload in enumerate(events(answer)):
        if not answer.stream:
            transcript.add(orjson.loads(payload), 0.5, streamed=False)
        elif payload != DONE and not transcript.add_event(payload, 0.25 * i):
            transcript.add(orjson.loads(payload), 0.25 * i)
    outcome = ArmOutcome(arm=name, status=500 if failed else 200, t_end=1.0,
                         error_class="http_status" if failed else
                         "truncated" if answer.cut is not None else None,
                         truncated=answer.cut is not None)
    return outcome, transcript.record(outcome), transcript


def reference_positions(answer: Answer) -> list[PositionLogprobs]:
    """The positions the record holds, built from the answer's tokens, not from the router."""
    if answer.logprobs == "none":
        return []
    return [PositionLogprobs(token=t, logprob=-math.inf if lp is None else lp,
                             token_id=i if answer.with_ids else None,
                             top=[TopLogprob(token=c, logprob=-math.inf if v is None else v) for c, v in top])
            for t, i, lp, top in answer.kept()]


prompts = st.none() | st.lists(st.builds(position, st.integers(0, 2**40)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(chat=st.booleans(), data=st.data())
def test_the_router_stores_the_row_the_models_stored(chat: bool, data: st.DataObject) -> None:
    names = data.draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    heads, lists, full = {}, {}, {}
    for name in names:
        answer = data.draw(answers(chat))
        outcome, lists[name], transcript = read(name, answer, failed=data.draw(st.booleans()))
        outcome.prompt_logprobs = data.draw(prompts)
        heads[name] = outcome
        full[name] = outcome.model_copy(update={"logprobs": reference_positions(answer)})
        filled = ArmOutcome(arm=name)
        transcript.fill(filled)  # the models the transcript builds for a caller that asks
        assert filled.logprobs == full[name].logprobs
    head = Exchange(run_id="r", request_id="q", endpoint="chat/completions" if chat else "completions",
                    stream=True, fingerprint="f", started_at=1.0, arms=heads)
    record = RoutedExchange(head, lists)
    reference = head.model_copy(update={"arms": full})
    assert record.full() == reference
    assert routed_row(record) == record_row(record) == v2_packer.exchange_row(reference)
    assert record_row(reference) == v2_packer.exchange_row(reference)


def test_a_vllm_shaped_stream_and_an_unpackable_arm() -> None:
    """The shape the router sees most (chat, streamed, ids, top-5), and an arm the blob
    cannot hold (an id beyond int64: everything in its JSON, models included)."""
    tokens: list[Token] = [(f"t{i}", 100 + i, -0.5 * i, [(f"t{i}", -0.5 * i), ("x", None)])
                           for i in range(16)]
    plain = Answer(True, True, True, "top", tokens, 1, None)
    big = Answer(True, True, True, "top", [*tokens[:3], ("y", BEYOND_INT64, None, [])], 2, None)
    arms = {"a": read("a", plain, False), "b": read("b", big, False)}
    head = Exchange(run_id="r", request_id="q", endpoint="chat/completions", stream=True,
                    fingerprint="f", started_at=1.0, arms={n: o for n, (o, _, _) in arms.items()})
    record = RoutedExchange(head, {n: lp for n, (_, lp, _) in arms.items()})
    reference = head.model_copy(update={"arms": {
        "a": arms["a"][0].model_copy(update={"logprobs": reference_positions(plain)}),
        "b": arms["b"][0].model_copy(update={"logprobs": reference_positions(big)})}})
    row = routed_row(record)
    assert row == v2_packer.exchange_row(reference)
    assert '"logprobs":[{"token":"t0"' in row["arms"]  # arm b's models, in its JSON
    assert len(head.arms["a"].logprobs) == 0  # the router built no model
    assert record.full().arms["a"].logprobs[15].top[1].logprob == -math.inf


def test_sse_parser_feeds_the_same_record() -> None:
    """Split across reads, the stream is read into the same lists."""
    answer = Answer(True, True, True, "top", [("a", 1, -1.0, [("a", -1.0)])] * 3, 1, None)
    stream = b"".join(b"data: " + e + b"\n\n" for e in events(answer)) + b"data: [DONE]\n\n"
    parser, transcript = SSEParser(), Transcript()
    for i in range(0, len(stream), 7):
        for payload in parser.feed(stream[i:i + 7]):
            if payload != DONE:
                assert transcript.add_event(payload, 0.0)
    assert transcript.record(ArmOutcome(arm="a")) == read("a", answer, False)[1]
