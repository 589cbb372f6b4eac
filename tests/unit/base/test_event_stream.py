"""``abserve.base.event_stream``: one SSE splitter, the same events however the bytes are cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from abserve.base.event_stream import SSEParser, payloads

STREAM = (b'data: {"a": 1}\n\n'
          b": a comment\nevent: message\nid: 7\ndata:{\"b\": 2}\n\n"
          b"data: line one\ndata: line two\n\n"
          b"event: no-data\n\n"
          b"data: [DONE]\n\n")
EXPECTED = [b'{"a": 1}', b'{"b": 2}', b"line one\nline two", b"[DONE]"]


def feed_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    parser, out, start = SSEParser(), [], 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        out += parser.feed(stream[start:cut])
        start = cut
    assert not parser.pending
    return out


def test_events_data_lines_are_joined_and_other_fields_ignored() -> None:
    assert payloads(STREAM) == EXPECTED


def test_crlf_line_ends_read_as_lf() -> None:
    assert payloads(STREAM.replace(b"\n", b"\r\n")) == EXPECTED


def test_an_unfinished_event_is_pending_and_not_yielded() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a": 1}\n\ndata: {"par') == [b'{"a": 1}']
    assert parser.pending
    assert parser.feed(b'tial": 1}\n') == []
    assert parser.feed(b"\n") == [b'{"partial": 1}']
    assert not parser.pending


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12), st.booleans())
def test_cutting_the_stream_anywhere_gives_the_same_payloads(cuts: list[int], crlf: bool) -> None:
    stream = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
    cuts = [min(c * len(stream) // len(STREAM), len(stream)) for c in cuts]
    assert feed_in_pieces(stream, cuts) == EXPECTED


@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
                min_size=1, max_size=6), st.data())
def test_any_payloads_survive_framing_and_any_cuts(datas: list[bytes], draw: st.DataObject) -> None:
    framed = b"".join(b"data: " + d + b"\n\n" for d in datas)
    cuts = draw.draw(st.lists(st.integers(min_value=0, max_value=len(framed)), max_size=10))
    expected = [d.lstrip(b" ") for d in datas]
    assert payloads(framed) == expected
    assert feed_in_pieces(framed, cuts) == expected
