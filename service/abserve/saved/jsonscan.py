"""Stream the values of a flat JSON object by byte range: one cheap scan, then one parse.

``vllm bench serve --save-detailed`` writes one JSON object whose per-request data are
parallel columns (``ttfts``, ``itls``, ``generated_texts``...), 100,000 entries each in a
large run, with the summary scalars after them. Reading request ``i`` needs entry ``i`` of
every column at once, so the columns are read side by side: ``scan_keys`` finds where every
key's value starts and ends in one pass of a regular expression over the bytes (no JSON
events reach Python), and ``stream_array`` parses one column's byte range with ``ijson``'s C
backend from its own file handle. Each column is parsed once and no column is held whole.

Why the scan is sound: ``"name"`` followed by ``:`` occurs in JSON only as a key, because a
quote inside a string is always escaped (``\\"``), so the regular expression cannot match
inside a string value. Keys of nested objects are found too; ``top_level`` folds a value
that is itself an object back into its key (vLLM's files have none; ``--metadata`` values
are strings).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import ijson

CHUNK = 8 << 20
_KEY = re.compile(rb'[{,]\s*"((?:[^"\\]|\\.){1,256})"\s*:\s*')
_OVERLAP = 600  # longer than any match (256 escaped characters and white space)
SMALL = 1 << 20  # a value under this many bytes is parsed whole


class LayoutError(ValueError):
    """The bytes are not the flat JSON object this module reads."""


@dataclass(frozen=True, slots=True)
class Span:
    """Where one key's value lies: ``start`` (inclusive) to ``end`` (exclusive)."""

    key: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def find_all(path: Path, pattern: re.Pattern[bytes]) -> Iterator[_Found]:
    """Every match of ``pattern`` (at most ``_OVERLAP`` bytes long) in the file, read in chunks;
    each match's ``pos`` is the file offset of the chunk it was found in."""
    with open(path, "rb") as f:
        offset, carry = 0, b""
        while True:
            chunk = f.read(CHUNK)
            data = carry + chunk
            last = not chunk
            limit = len(data) if last else max(len(data) - _OVERLAP, 0)
            for match in pattern.finditer(data, 0, len(data)):
                if match.start() >= limit:
                    break
                yield _Found(match, offset - len(carry))
            if last:
                return
            carry = data[limit:]
            offset += len(chunk)


class _Found:
    """A match and the file offset of the data it was found in (``start``/``end`` in the file)."""

    __slots__ = ("base", "match")

    def __init__(self, match: re.Match[bytes], base: int) -> None:
        self.match, self.base = match, base

    def group(self, n: int) -> bytes | None:
        return self.match.group(n)

    def start(self) -> int:
        return self.base + self.match.start()

    def end(self) -> int:
        return self.base + self.match.end()


def _matches(path: Path) -> Iterator[tuple[str, int, int]]:
    """(key, start of the match, end of the match) for every key in the file, in order."""
    for found in find_all(path, _KEY):
        yield json.loads(b'"' + (found.group(1) or b"") + b'"'), found.start(), found.end()


def end_of_object(path: Path, size: int) -> int:
    """Offset of the closing ``}`` of the object (the last non-blank byte), else LayoutError."""
    with open(path, "rb") as f:
        f.seek(max(size - 4096, 0))
        tail = f.read()
    stripped = tail.rstrip()
    if not stripped.endswith(b"}"):
        raise LayoutError("does not end with '}' (truncated?)")
    return size - (len(tail) - len(stripped)) - 1


def scan_keys(path: Path) -> list[Span]:
    """Every key of the file's object and its value's byte range (nested keys included)."""
    size = path.stat().st_size
    close = end_of_object(path, size)
    found = list(_matches(path))
    spans = []
    for i, (key, _start, end) in enumerate(found):
        stop = found[i + 1][1] if i + 1 < len(found) else close
        spans.append(Span(key, end, stop))
    return spans


def read_bytes(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def top_level(path: Path, spans: list[Span]) -> tuple[dict[str, Any], dict[str, Span]]:
    """Small values parsed (a nested object's keys folded back into it) and large ones as spans.

    A large value must be an array (a column); anything else is a LayoutError."""
    small: dict[str, Any] = {}
    large: dict[str, Span] = {}
    i = 0
    while i < len(spans):
        span = spans[i]
        if span.size >= SMALL:
            large[span.key] = span
            i += 1
            continue
        j, end = i, span.end
        while True:
            try:
                small[span.key] = json.loads(read_bytes(path, span.start, end))
                break
            except ValueError:
                j += 1
                if j >= len(spans) or spans[j].end - span.start >= SMALL:
                    raise LayoutError(f"the value of {span.key!r} is not JSON") from None
                end = spans[j].end
        i = j + 1
    return small, large


class _Bounded:
    """A binary file read only from ``start`` to ``end`` (what ijson is given)."""

    def __init__(self, f: IO[bytes], start: int, end: int) -> None:
        f.seek(start)
        self._f, self._left = f, end - start

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data


def stream_array(path: Path, span: Span) -> Iterator[Any]:
    """The items of the array at ``span``, parsed one at a time from a file handle of its own.

    Floats come back as ``float`` (not ``Decimal``). ijson's errors propagate."""
    with open(path, "rb") as f:
        yield from ijson.items(_Bounded(f, span.start, span.end), "item", use_float=True)
