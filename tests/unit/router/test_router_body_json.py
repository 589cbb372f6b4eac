"""``body_json.loads`` (data URLs cut out before parsing) is ``orjson.loads`` for every input.

Equal results for valid bodies, the same error for invalid ones, on hypothesis-built JSON
whose strings are often data URLs (as values, keys, inside longer strings, with escapes,
control characters and non-ASCII bytes) and on byte-level mutations of those bodies
(inserted quotes and backslashes, cut bytes): the cases where a cut could be wrong. Cuts
are made from 8 bytes on here (``min_cut``) so that small generated URLs take the fast path.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abserve.openai_request import body_json
from abserve.openai_request.validation import parse_json

MIN_CUT = 8
PAYLOAD = st.text(alphabet=st.sampled_from([*"AZaz09+/=;,", '"', "\\", "\n", "\x01", "é",
                                            "\u2028"]), min_size=0, max_size=24)
DATA_URL = st.builds(lambda mime, data: f"data:{mime};base64,{data}",
                     st.sampled_from(["image/png", "audio/wav", "x"]), PAYLOAD)
STRING = DATA_URL | st.text(max_size=6) | st.builds(lambda a, b: a + b, st.text(max_size=3),
                                                    DATA_URL)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False) | STRING,
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(STRING, inner, max_size=4), max_leaves=12)
MUTATION = st.tuples(st.integers(0, 10_000), st.sampled_from([b'"', b"\\", b"", b"\x00", b"}"]),
                     st.integers(0, 2))


def outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", parse(raw)
    except orjson.JSONDecodeError as exc:
        return "error", str(exc)


def fast(raw: bytes) -> Any:
    return body_json.loads(raw, min_cut=MIN_CUT)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_valid_bodies_parse_alike(doc: Any) -> None:
    raw = orjson.dumps(doc)
    assert outcome(fast, raw) == outcome(orjson.loads, raw)


@settings(max_examples=600, deadline=None)
@given(JSON, st.lists(MUTATION, min_size=1, max_size=3))
def test_mutated_bodies_parse_or_fail_alike(doc: Any, mutations: list[tuple[int, bytes, int]]
                                            ) -> None:
    raw = orjson.dumps({"messages": doc})
    for at, insert, drop in mutations:
        at %= len(raw) + 1
        raw = raw[:at] + insert + raw[at + drop:]
    assert outcome(fast, raw) == outcome(orjson.loads, raw)


@pytest.mark.parametrize("raw", [
    b'{"data:AAAAAAAAAAAA": 1}',  # a data URL as a key
    b'{"t": "a \\"data:AAAAAAAAAAAA"}',  # inside a longer string (its quote escaped)
    b'{"t": "data:AAAA\\/AAAAAAAA"}',  # an escape inside
    b'{"t": "data:AAAA\x01AAAAAAAA"}',  # a raw control character (invalid JSON)
    b'{"t": "data:AAAA\xc3\xa9AAAAAAAA"}',  # non-ASCII
    b'{"t": "data:AAAA\xffAAAAAAAA"}',  # not UTF-8 (invalid JSON)
    b'["x"data:AAAAAAAAAAAA"]',  # a closing quote, not an opening one (invalid JSON)
    b'{"t": "data:AAAAAAAAAAAA',  # no closing quote (invalid JSON)
])
def test_what_cannot_be_cut_is_parsed_the_ordinary_way(raw: bytes) -> None:
    assert outcome(fast, raw) == outcome(orjson.loads, raw)


def test_a_stand_in_in_the_body_is_left_as_the_client_sent_it() -> None:
    """A client string shaped like a stand-in is the client's, never a URL's place."""
    url = "data:image/png;base64," + "A" * 64
    raw = orjson.dumps({"a": url, "b": "~" + "0" * 40})
    assert fast(raw) == orjson.loads(raw)


def test_large_data_urls_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body with large data URLs is parsed without them: orjson never sees the base64."""
    url = "data:image/png;base64," + "QUJD" * 2048
    raw = orjson.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}] * 3}]})
    seen: list[int] = []
    real = orjson.loads

    def spy(data: bytes) -> Any:
        seen.append(len(data))
        return real(data)

    monkeypatch.setattr(orjson, "loads", spy)
    assert body_json.loads(raw) == real(raw)
    assert len(seen) == 1
    assert seen[0] < len(raw) // 20


def test_parse_json_uses_it_and_keeps_its_errors() -> None:
    url = "data:image/png;base64," + "QUJD" * 2048
    assert parse_json(orjson.dumps({"u": url}))["u"] == url
    with pytest.raises(Exception, match="not valid JSON"):
        parse_json(orjson.dumps({"u": url})[:-1])
