"""Packing an exchange's token data into the blob of record schema v2 (the writing side of
``abserve.model.token_columns``, which describes the format and reads it back).

The input is each arm's token data as lists (``abserve.model.token_lists.ArmTokens``): the router
hands over what it parsed without building per-position models, and a validated record is
read into the same lists (``pack_arms``), so every writer goes through this one packer. A
column is packed with ``struct`` straight from its list (little-endian, fixed sizes) and
byte-shuffled by slicing: for the few dozen values of a column this is several times
cheaper than building a numpy array per column, and the bytes are the same (tested against
the numpy packer the format was defined with, ``tests/support/v2_packer.py``). Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from abserve.model.records import ArmOutcome
from abserve.model.token_lists import ArmTokens, PositionLists

FORMAT = 2  # the first byte of a blob
ZLIB_LEVEL = 3  # level 6 saves ~7% more, at twice the compression time on the router
PACKED_FIELDS = frozenset({"token_ids", "token_times", "text", "logprobs", "prompt_logprobs"})
STRINGS = "__strings__"  # the header's key of the shared string table
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_CODES = {"<i4": "i", "<i8": "q", "<u4": "I", "<f8": "d"}

Packed = tuple[str, str, int, bytes]  # column name, numpy dtype (little-endian), length, bytes


class _Unpackable(Exception):
    """An arm whose token data the columns cannot hold exactly (an int beyond int64)."""


def _column(name: str, dtype: str, values: Sequence[Any]) -> Packed:
    """``values`` packed as ``dtype``, byte-shuffled: the n-th byte of every value together."""
    n = len(values)
    raw = struct.pack(f"<{n}{_CODES[dtype]}", *values)
    size = len(raw) // n if n else 1
    if size == 1 or n < 2:
        return name, dtype, n, raw
    return name, dtype, n, b"".join([raw[i::size] for i in range(size)])


def _bytes(name: str, data: bytes) -> Packed:
    return name, "|u1", len(data), data


class _StringTable:
    """The texts of every arm's tokens, each once, in order of first use."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def of(self, name: str, texts: list[str]) -> Packed:
        index = self.index
        for text in dict.fromkeys(texts):  # the new texts, once each, in order
            if text not in index:
                index[text] = len(index)
        return _column(name, "<u4", list(map(index.__getitem__, texts)))

    def forget_after(self, mark: int) -> None:
        self.index = dict(list(self.index.items())[:mark])

    def columns(self) -> list[Packed]:
        encoded = [t.encode("utf-8", "surrogatepass") for t in self.index]
        return [_column("len", "<u4", [len(b) for b in encoded]), _bytes("utf8", b"".join(encoded))]


def _int_columns(name: str, values: Sequence[int | None] | None) -> list[Packed]:
    """``values`` as one int column (int32 when they fit) plus a mask of the ``None``s;
    nothing when all are ``None`` (or ``values`` is None)."""
    if not values:
        return []
    present: Sequence[int] = [v for v in values if v is not None] if None in values else values  # type: ignore[assignment]
    if not present:
        return []
    low, high = min(present), max(present)
    if low < _INT64[0] or high > _INT64[1]:
        raise _Unpackable(name)
    dtype = "<i4" if _INT32[0] <= low and high <= _INT32[1] else "<i8"
    if len(present) == len(values):
        return [_column(name, dtype, present)]
    filled = [0 if v is None else v for v in values]
    mask = bytes([v is None for v in values])
    return [_column(name, dtype, filled), _bytes(name + "none", mask)]


def _position_columns(prefix: str, positions: PositionLists, table: _StringTable) -> list[Packed]:
    return [
        table.of(f"{prefix}.tok", positions.tokens),
        _column(f"{prefix}.lp", "<f8", positions.logprobs),
        *_int_columns(f"{prefix}.id", positions.token_ids),
        _column(f"{prefix}.k", "<u4", positions.counts),
        table.of(f"{prefix}.top.tok", positions.top_tokens),
        _column(f"{prefix}.top.lp", "<f8", positions.top_logprobs),
        *_int_columns(f"{prefix}.top.id", positions.top_ids),
    ]


def _has_nan(positions: PositionLists | None) -> bool:
    if positions is None:
        return False
    return any(map(math.isnan, positions.logprobs)) or any(map(math.isnan, positions.top_logprobs))


def _arm_columns(arm: ArmTokens, table: _StringTable) -> list[Packed]:
    """The compared columns first (``compare_key`` is one contiguous slice), then the rest."""
    cols: list[Packed] = []
    if arm.token_ids:
        cols += _int_columns("ids", arm.token_ids)
    if arm.logprobs.tokens:
        cols += _position_columns("lp", arm.logprobs, table)
    if arm.prompt_logprobs is not None:
        cols += _position_columns("plp", arm.prompt_logprobs, table)
    if arm.token_times:
        cols.append(_column("times", "<f8", arm.token_times))
    if arm.text:
        cols.append(_bytes("text", arm.text.encode("utf-8", "surrogatepass")))
    return cols


def _header_json(header: dict[str, Any]) -> bytes:
    """``json.dumps(header, separators=(",", ":"))``'s bytes; by orjson (~20x less CPU) when
    every key is printable ASCII with nothing to escape, where both write the same bytes."""
    if all(key.isascii() and key.isprintable() and '"' not in key and "\\" not in key
           for key in header):
        return orjson.dumps(header)
    return json.dumps(header, separators=(",", ":")).encode()


def pack_tokens(arms: Mapping[str, ArmTokens], level: int = ZLIB_LEVEL) -> tuple[dict[str, set[str]], bytes]:
    """The arms' token data as one blob, and per arm the fields packed there (for the
    caller to leave out of the arm's JSON). An arm that cannot be packed exactly is absent
    from the first: all its fields stay in its JSON."""
    table = _StringTable()
    header: dict[str, Any] = {}
    chunks: list[bytes] = []
    packed: dict[str, set[str]] = {}
    for name, arm in arms.items():
        mark = len(table.index)
        try:
            cols = _arm_columns(arm, table)
        except _Unpackable:
            table.forget_after(mark)  # forget this arm's strings
            continue
        packed[name] = set(PACKED_FIELDS)
        nan = _has_nan(arm.logprobs) or _has_nan(arm.prompt_logprobs)
        header[name] = {"cols": [(c, dtype, n) for c, dtype, n, _ in cols], "nan": nan}
        chunks += [data for *_, data in cols]
    strings = table.columns()
    header[STRINGS] = {"cols": [(c, dtype, n) for c, dtype, n, _ in strings], "nan": False}
    chunks += [data for *_, data in strings]
    head = _header_json(header)
    body = struct.pack("<I", len(head)) + head + b"".join(chunks)
    return packed, bytes([FORMAT]) + zlib.compress(body, level)


def pack_arms(arms: Mapping[str, ArmOutcome], level: int = ZLIB_LEVEL) -> tuple[dict[str, set[str]], bytes]:
    """``pack_tokens`` of validated outcomes."""
    return pack_tokens({name: ArmTokens.of_outcome(o) for name, o in arms.items()}, level)
