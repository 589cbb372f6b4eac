"""Read a traffic file one item at a time, with its line number, never the whole file.

Two layouts: JSON Lines (one JSON value per line; blank lines skipped) and one JSON array
(``vllm bench serve``'s ShareGPT files), decoded element by element from a text buffer that
holds at most the element being read. A line that is not JSON is an item with an ``error``
(the caller decides whether that ends the run or is counted); a broken array element ends
the reading, since nothing after it can be found again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from abserve.traffic.sources.spec import RequestsFileError

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark some editors write first: skipped
CHUNK_CHARS = 1 << 20
MAX_ELEMENT_CHARS = 256 << 20  # an array element larger than this is refused, not buffered on


@dataclass(frozen=True)
class RawItem:
    """One JSON value of the file (``value``), or why its line is not one (``error``)."""

    line: int
    value: Any = None
    error: str | None = None


def is_array_file(path: Path) -> bool:
    """Whether the file is one JSON array (its first non-blank character is ``[``)."""
    with path.open("rb") as fh:
        first = True
        while chunk := fh.read(4096):
            stripped = (chunk.removeprefix(BOM) if first else chunk).lstrip()
            first = False
            if stripped:
                return stripped[:1] == b"["
    return False


def iter_items(path: Path) -> Iterator[RawItem]:
    """Every item of ``path`` in file order (JSON Lines or one JSON array)."""
    if not path.is_file():
        raise RequestsFileError(f"{path}: no such file")
    if is_array_file(path):
        yield from _array_items(path)
    else:
        yield from _jsonl_items(path)


def _jsonl_items(path: Path) -> Iterator[RawItem]:
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if lineno == 1:
                line = line.removeprefix(BOM)
            if not line.strip():
                continue
            try:
                yield RawItem(lineno, orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                yield RawItem(lineno, error=f"not valid JSON ({str(exc).split(':')[0]})")


def _array_items(path: Path) -> Iterator[RawItem]:
    decoder = json.JSONDecoder()
    with path.open(encoding="utf-8-sig") as fh:
        buf, line, eof = fh.read(CHUNK_CHARS), 1, False
        pos = _skip(buf, 0)
        if buf[pos:pos + 1] != "[":
            raise RequestsFileError(f"{path}:1: expected a JSON array")
        line += buf.count("\n", 0, pos)
        pos += 1
        need_comma = False
        while True:
            start = _skip(buf, pos)
            if start >= len(buf) and not eof:
                buf, pos, eof = _refill(fh, buf, pos)
                continue
            if buf[start:start + 1] == "]":
                return
            if need_comma:
                if buf[start:start + 1] != ",":
                    raise RequestsFileError(f"{path}:{line + buf.count(chr(10), pos, start)}: "
                                            "expected ',' or ']' between array elements")
                start, need_comma = _skip(buf, start + 1), False
            line += buf.count("\n", pos, start)
            pos = start
            try:
                value, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if eof or len(buf) - pos > MAX_ELEMENT_CHARS:
                    raise RequestsFileError(f"{path}:{line}: the array element starting here is not "
                                            f"valid JSON ({exc.msg})") from None
                buf, pos, eof = _refill(fh, buf, pos)
                continue
            if end >= len(buf) and not eof:  # a number may go on in the next chunk
                buf, pos, eof = _refill(fh, buf, pos)
                continue
            yield RawItem(line, value)
            line += buf.count("\n", pos, end)
            pos, need_comma = end, True


def _skip(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n":
        pos += 1
    return pos


def _refill(fh: Any, buf: str, pos: int) -> tuple[str, int, bool]:
    """Drop what was consumed, read the next chunk; (buffer, position 0, at end of file)."""
    more = fh.read(CHUNK_CHARS)
    return buf[pos:] + more, 0, not more
