"""The record schema v2 packer as it was defined (``abserve/model/token_columns.py`` and
``abserve/store/rows.py`` at cf65602: numpy per column, from the validated models), kept
verbatim as the reference the stored bytes must not drift from: the packer of
``abserve.model.token_pack`` (lists, no numpy) and the router's record path (logprobs as lists,
``abserve.store.rows.routed_row``) are tested against it byte for byte
(``tests/unit/model/test_token_columns.py``, ``tests/unit/router/test_router_record_row.py``).
Not used by abserve.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from abserve.model.records import ArmOutcome, Exchange, PositionLogprobs
from abserve.store import rows
from abserve.store.rows import Row

FORMAT = 2  # the first byte of a blob
ZLIB_LEVEL = 3  # level 6 saves ~7% more, at twice the compression time on the router
PACKED_FIELDS = frozenset({"token_ids", "token_times", "text", "logprobs", "prompt_logprobs"})
_INT32 = np.iinfo(np.int32)
_INT64 = np.iinfo(np.int64)
_FLOAT_COLUMNS = ("lp.lp", "lp.top.lp", "plp.lp", "plp.top.lp")
_STRINGS = "__strings__"  # the header's key of the shared string table

Column = tuple[str, np.ndarray]


class _Unpackable(Exception):
    """An arm whose token data the columns cannot hold exactly (an int beyond int64)."""


class _StringTable:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def of(self, texts: list[str]) -> np.ndarray:
        index = self.index
        for text in dict.fromkeys(texts):  # the new texts, once each, in order
            if text not in index:
                index[text] = len(index)
        return np.array(list(map(index.__getitem__, texts)), dtype="<u4")

    def columns(self) -> list[Column]:
        encoded = [t.encode("utf-8", "surrogatepass") for t in self.index]
        return [("len", np.array([len(b) for b in encoded], dtype="<u4")),
                ("utf8", np.frombuffer(b"".join(encoded), dtype=np.uint8))]


def _int_columns(name: str, values: list[int | None]) -> list[Column]:
    """``values`` as one int column (int32 when they fit) plus a mask of the ``None``s;
    nothing when all are ``None``."""
    present = [v for v in values if v is not None]
    if not present:
        return []
    low, high = min(present), max(present)
    if low < _INT64.min or high > _INT64.max:
        raise _Unpackable(name)
    dtype = "<i4" if _INT32.min <= low and high <= _INT32.max else "<i8"
    if len(present) == len(values):
        return [(name, np.array(values, dtype=dtype))]
    filled = [0 if v is None else v for v in values]
    mask = np.array([v is None for v in values], dtype=np.uint8)
    return [(name, np.array(filled, dtype=dtype)), (name + "none", mask)]


def _position_columns(prefix: str, positions: list[PositionLogprobs], table: _StringTable) -> list[Column]:
    tops = [t for p in positions for t in p.top]
    return [
        (f"{prefix}.tok", table.of([p.token for p in positions])),
        (f"{prefix}.lp", np.array([p.logprob for p in positions], dtype="<f8")),
        *_int_columns(f"{prefix}.id", [p.token_id for p in positions]),
        (f"{prefix}.k", np.array([len(p.top) for p in positions], dtype="<u4")),
        (f"{prefix}.top.tok", table.of([t.token for t in tops])),
        (f"{prefix}.top.lp", np.array([t.logprob for t in tops], dtype="<f8")),
        *_int_columns(f"{prefix}.top.id", [t.token_id for t in tops]),
    ]


def _arm_columns(outcome: ArmOutcome, table: _StringTable) -> list[Column]:
    """The compared columns first (``compare_key`` is one contiguous slice), then the rest."""
    cols: list[Column] = []
    if outcome.token_ids:
        cols += _int_columns("ids", list(outcome.token_ids))
    if outcome.logprobs:
        cols += _position_columns("lp", outcome.logprobs, table)
    if outcome.prompt_logprobs is not None:
        cols += _position_columns("plp", outcome.prompt_logprobs, table)
    if outcome.token_times:
        cols.append(("times", np.array(outcome.token_times, dtype="<f8")))
    if outcome.text:
        cols.append(("text", np.frombuffer(outcome.text.encode("utf-8", "surrogatepass"), dtype=np.uint8)))
    return cols


def _shuffled(array: np.ndarray) -> bytes:
    size = array.dtype.itemsize
    if size == 1 or len(array) < 2:
        return array.tobytes()
    return array.view(np.uint8).reshape(len(array), size).T.tobytes()


def pack_arms(arms: Mapping[str, ArmOutcome], level: int = ZLIB_LEVEL) -> tuple[dict[str, set[str]], bytes]:
    """The arms' token data as one blob, and per arm the fields packed there (for the
    caller to leave out of the arm's JSON). An arm that cannot be packed exactly is absent
    from the first: all its fields stay in its JSON."""
    table = _StringTable()
    header: dict[str, Any] = {}
    chunks: list[bytes] = []
    packed: dict[str, set[str]] = {}
    for name, outcome in arms.items():
        mark = len(table.index)
        try:
            cols = _arm_columns(outcome, table)
        except _Unpackable:
            table.index = dict(list(table.index.items())[:mark])  # forget this arm's strings
            continue
        packed[name] = set(PACKED_FIELDS)
        nan = any(np.isnan(a).any() for c, a in cols if c in _FLOAT_COLUMNS)
        header[name] = {"cols": [(c, a.dtype.str, len(a)) for c, a in cols], "nan": bool(nan)}
        chunks += [_shuffled(a) for _, a in cols]
    strings = table.columns()
    header[_STRINGS] = {"cols": [(c, a.dtype.str, len(a)) for c, a in strings], "nan": False}
    chunks += [_shuffled(a) for _, a in strings]
    head = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack("<I", len(head)) + head + b"".join(chunks)
    return packed, bytes([FORMAT]) + zlib.compress(body, level)


def exchange_row(exchange: Exchange) -> Row:
    """The ``abserve_exchanges`` row of one exchange: the scalars' columns as today's
    ``rows.exchange_row`` writes them, the arms' JSON and blob as the reference did."""
    packed, tokens = pack_arms(exchange.arms)
    return {**rows.exchange_row(exchange), "tokens": tokens,
            "arms": rows.dumps_json(exchange.arms, exclude=packed or None)}
