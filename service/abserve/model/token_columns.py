"""An exchange's token-level data as packed columns: the stored form of record schema v2.

A v1 record kept every output position and top-k candidate as one JSON object (~63 KB an
exchange at 3 arms x 64 tokens x top-5). Here each arm's token data is a handful of
parallel arrays (token ids, token times, chosen logprobs, per-position top-k counts, top-k
ids and logprobs, string-table indices of the tokens' texts) packed as little-endian bytes,
and the whole exchange (all arms and one string table shared by them) is one
zlib-compressed blob. The arrays are byte-shuffled before compression (the n-th byte of
every value together: like-valued floats then compress), and arms that agree compress to
almost nothing more than one arm. The blob is written by ``abserve.model.token_pack``
(``pack_tokens`` from an arm's token data as lists, the router's form; ``pack_arms`` from
validated outcomes) and read here.

Exactness: floats are stored as float64 bytes, so ``-inf``, NaN and ``-0.0`` come back bit
for bit; ints as int32 or int64 (an arm with an int outside int64 is not packed: its token
data stays in the JSON of its scalars, ``pack_arms``); ``None`` token ids as a mask; token
texts as UTF-8 with surrogates passed through. ``unpack`` then ``ArmColumns.outcome`` gives
back the ``ArmOutcome`` packed, equal field for field.

Reading is cheap where the judgment needs it: ``ArmColumns.compare_key`` is the header and
raw bytes of the compared columns (ids, logprobs, top-k, prompt logprobs), so two arms'
token data are equal when their keys are (the string table is shared and deduplicated,
so equal indices mean equal texts), without building one object per position. Pure: no I/O.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from abserve.model.records import ArmOutcome, Exchange, SlimOutcome
from abserve.model.token_pack import FORMAT, STRINGS, pack_arms

UNCOMPARED = ("times", "text")  # columns that are not token data the equality compares
_ITEMSIZE = {np.dtype(kind).str: np.dtype(kind).itemsize for kind in ("<i4", "<i8", "<u4", "<f8", "u1")}

Entry = tuple[str, str, int]  # column name, numpy dtype (little-endian), length


def _unshuffled(data: memoryview, dtype: str, n: int) -> np.ndarray:
    kind = np.dtype(dtype)
    if kind.itemsize == 1 or n < 2:
        return np.frombuffer(data, dtype=kind, count=n)
    raw = np.frombuffer(data, dtype=np.uint8).reshape(kind.itemsize, n)
    return raw.T.copy().view(kind).reshape(n)


@dataclass(frozen=True, slots=True)
class _Strings:
    lengths: np.ndarray
    data: memoryview

    def texts(self) -> list[str]:
        ends = np.cumsum(self.lengths).tolist()
        starts = [0, *ends[:-1]] if ends else []
        raw = bytes(self.data)
        return [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(starts, ends, strict=True)]


@dataclass(eq=False)
class ArmColumns:
    """One arm of a stored exchange: its scalars as decoded JSON (``doc``) and its packed
    token columns. An arm stored unpacked (``packed`` False) has everything in ``doc``."""

    doc: dict[str, Any]
    packed: bool = False
    entries: dict[str, tuple[str, int, memoryview]] = field(default_factory=dict)
    nan: bool = False
    compare_key: tuple[tuple[Entry, ...], bytes] = ((), b"")
    strings: _Strings | None = None

    def count(self, name: str) -> int:
        """Length of column ``name``; 0 when absent."""
        entry = self.entries.get(name)
        return 0 if entry is None else entry[1]

    def has(self, name: str) -> bool:
        return name in self.entries

    def array(self, name: str) -> np.ndarray | None:
        entry = self.entries.get(name)
        return None if entry is None else _unshuffled(entry[2], entry[0], entry[1])

    @property
    def token_count(self) -> int:
        """How many output tokens the router saw (``max(len(token_ids), len(token_times))``)."""
        if not self.packed:
            return max(len(self.doc.get("token_ids") or []), len(self.doc.get("token_times") or []))
        return max(self.count("ids"), self.count("times"))

    @property
    def has_tokens(self) -> bool:
        """Whether the outcome carried a token sequence (ids or chosen tokens)."""
        if not self.packed:
            return bool(self.doc.get("token_ids") or self.doc.get("logprobs"))
        return self.count("ids") > 0 or self.count("lp.tok") > 0

    @property
    def prompt_positions(self) -> int | None:
        """How many prompt positions were sampled; None when none were asked for."""
        if not self.packed:
            prompts = self.doc.get("prompt_logprobs")
            return None if prompts is None else len(prompts)
        return self.count("plp.tok") if self.has("plp.tok") else None

    def times(self) -> np.ndarray:
        if not self.packed:
            return np.asarray(self.doc.get("token_times") or [], dtype=np.float64)
        times = self.array("times")
        return np.zeros(0) if times is None else times

    def outcome(self) -> ArmOutcome:
        """The validated ``ArmOutcome`` this arm was packed from."""
        if not self.packed:
            return ArmOutcome.model_validate(self.doc)
        return ArmOutcome.model_validate({**self.doc, **self._token_fields()})

    def _token_fields(self) -> dict[str, Any]:
        texts = self.strings.texts() if self.strings is not None else []
        out: dict[str, Any] = {}
        ids = self._ints("ids")
        if ids is not None:
            out["token_ids"] = ids
        times = self.array("times")
        if times is not None:
            out["token_times"] = times.tolist()
        text = self.array("text")
        if text is not None:
            out["text"] = text.tobytes().decode("utf-8", "surrogatepass")
        if self.has("lp.tok"):
            out["logprobs"] = self._positions("lp", texts)
        if self.has("plp.tok"):
            out["prompt_logprobs"] = self._positions("plp", texts)
        return out

    def _ints(self, name: str) -> list[int | None] | None:
        values = self.array(name)
        if values is None:
            return None
        out: list[int | None] = values.tolist()
        mask = self.array(name + "none")
        if mask is not None:
            out = [None if m else v for v, m in zip(out, mask.tolist(), strict=True)]
        return out

    def _positions(self, prefix: str, texts: list[str]) -> list[dict[str, Any]]:
        n = self.count(f"{prefix}.tok")
        toks, lps, counts = (self._list(f"{prefix}.{c}") for c in ("tok", "lp", "k"))
        ids = self._ints(f"{prefix}.id") or [None] * n
        ttoks, tlps = self._list(f"{prefix}.top.tok"), self._list(f"{prefix}.top.lp")
        tids = self._ints(f"{prefix}.top.id") or [None] * len(ttoks)
        out, at = [], 0
        for i in range(n):
            k = counts[i]
            top = [{"token": texts[ttoks[j]], "logprob": tlps[j], "token_id": tids[j]}
                   for j in range(at, at + k)]
            at += k
            out.append({"token": texts[toks[i]], "logprob": lps[i], "token_id": ids[i], "top": top})
        return out

    def _list(self, name: str) -> list[Any]:
        values = self.array(name)
        return [] if values is None else values.tolist()


def unpack(docs: dict[str, dict[str, Any]], blob: bytes | memoryview) -> dict[str, ArmColumns]:
    """Each arm of a stored v2 exchange: ``docs`` (the arms' JSON, decoded) joined with the
    columns of ``blob`` (``pack_arms``'s)."""
    view = memoryview(blob)
    if view[0] != FORMAT:
        raise ValueError(f"token columns of format {view[0]}; this abserve reads format {FORMAT}")
    body = memoryview(zlib.decompress(view[1:]))
    (size,) = struct.unpack_from("<I", body)
    header = json.loads(bytes(body[4:4 + size]))
    at = 4 + size
    spans: dict[str, tuple[dict[str, tuple[str, int, memoryview]], tuple[tuple[Entry, ...], bytes]]] = {}
    for name, part in header.items():
        entries, compared, start = {}, [], at
        cut = start
        for column, dtype, n in part["cols"]:
            end = at + _ITEMSIZE[dtype] * n
            entries[column] = (dtype, n, body[at:end])
            if column not in UNCOMPARED:
                compared.append((column, dtype, n))
                cut = end
            at = end
        key = (tuple(compared), bytes(body[start:cut]))
        spans[name] = (entries, key)
    string_entries = spans[STRINGS][0]
    lengths = _unshuffled(string_entries["len"][2], string_entries["len"][0], string_entries["len"][1])
    strings = _Strings(lengths, string_entries["utf8"][2])
    out: dict[str, ArmColumns] = {}
    for name, doc in docs.items():
        if name not in header:
            out[name] = ArmColumns(doc)
            continue
        entries, key = spans[name]
        out[name] = ArmColumns(doc, True, entries, bool(header[name]["nan"]), key, strings)
    return out


def columns_of(arms: Mapping[str, ArmOutcome]) -> dict[str, ArmColumns]:
    """``unpack(pack_arms(arms))`` without the JSON round trip of the scalars: the stored
    view of outcomes in memory (what the judgment would read of them once stored)."""
    packed, blob = pack_arms(arms, level=1)
    docs = {name: o.model_dump(exclude=packed.get(name, set())) for name, o in arms.items()}
    return unpack(docs, blob)


@dataclass(frozen=True, slots=True)
class RawExchange:
    """A stored exchange before validation: its scalars, its arms as stored columns (each
    outcome's scalars as decoded JSON, its token-level data as packed arrays,
    ``abserve.model.token_columns.ArmColumns``) and ``full()`` to build the validated ``Exchange``
    when one is needed (the report's mismatches). The streaming judgment reads these:
    comparing two arms' token data as raw column bytes is far cheaper than validating
    every position and top-k candidate into models (``abserve.compare.digest``)."""

    run_id: str
    request_id: str
    schema_version: int
    endpoint: Literal["chat/completions", "completions"]
    stream: bool
    fingerprint: str
    started_at: float
    tags: dict[str, str]
    image_hashes: list[str]
    arms: dict[str, ArmColumns]
    full: Callable[[], Exchange]
    prompt_text: str | None = None  # stored only when the router was configured to


def slim_outcome(columns: ArmColumns) -> SlimOutcome:
    """From an outcome as stored (``RawExchange.arms``): its scalars and its columns."""
    doc = columns.doc
    return SlimOutcome(arm=doc["arm"], status=doc.get("status"), error_class=doc.get("error_class"),
                       t_send=float(doc.get("t_send", 0.0)), t_first_token=doc.get("t_first_token"),
                       t_end=doc.get("t_end"), finish_reason=doc.get("finish_reason"),
                       usage=doc.get("usage"), truncated=bool(doc.get("truncated", False)),
                       tokens=columns.token_count, has_tokens=columns.has_tokens)
