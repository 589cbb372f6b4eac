"""An exchange record as a row of ``abserve_exchanges`` and back, and JSON text as the store
keeps it.

Pure functions, no I/O. ``exchange_row`` is called by ``BatchWriter.put`` in the router's
event loop, one record at a time as each exchange ends, not by the writer thread for a
whole batch at once: a batch serialised on the writer thread held the GIL for milliseconds
while the loop waited, every flush (the router's p99 latency at 1 stream came in bursts at
the flush interval; ``benchmarks/router_overhead.md``).

A row is written in the columnar form (record schema v2, ``abserve.model.token_columns``): the
arms' scalars as JSON in ``arms``, their token-level data as one packed blob in ``tokens``.
The router's own records (``RoutedExchange``: output logprobs as lists, never as models)
are packed from their lists (``routed_row``); the bytes are those ``exchange_row`` writes
for the same record with its models (``tests/unit/store/test_routed_row.py``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter
from pydantic_core import from_json, to_json
from sqlalchemy import RowMapping

from abserve.model.records import SCHEMA_VERSION, ArmOutcome, Exchange
from abserve.model.token_columns import ArmColumns, RawExchange, unpack
from abserve.model.token_lists import RoutedExchange
from abserve.model.token_pack import pack_arms, pack_tokens
from abserve.store.layout import StoreSchemaError

Row = dict[str, Any]
_ARMS = TypeAdapter(dict[str, ArmOutcome])


def dumps_json(value: Any, exclude: Any = None) -> str:
    """JSON text that keeps ``inf``/``nan`` (as JavaScript constants) and escapes NUL."""
    return to_json(value, inf_nan_mode="constants", exclude=exclude).decode()


def exchange_row(exchange: Exchange) -> Row:
    """The ``abserve_exchanges`` row of one exchange."""
    packed, tokens = pack_arms(exchange.arms)
    return _row(exchange, exchange.arms, packed, tokens)


def routed_row(record: RoutedExchange) -> Row:
    """The row of the router's record: the same row as ``exchange_row(record.full())``,
    without building the models (but for an arm the blob cannot hold, rare: see
    ``token_pack``)."""
    packed, tokens = pack_tokens(record.tokens())
    arms = record.head.arms
    if len(packed) < len(arms):  # an arm left unpacked keeps everything in its JSON
        arms = {name: o if name in packed else record.arm(name) for name, o in arms.items()}
    return _row(record.head, arms, packed, tokens)


def record_row(record: Exchange | RoutedExchange) -> Row:
    """The row of either kind of record."""
    return exchange_row(record) if isinstance(record, Exchange) else routed_row(record)


def _row(exchange: Exchange, arms: dict[str, ArmOutcome], packed: dict[str, set[str]],
         tokens: bytes) -> Row:
    return {
        "run_id": exchange.run_id,
        "request_id": exchange.request_id,
        "schema_version": exchange.schema_version,
        "started_at": exchange.started_at,
        "endpoint": exchange.endpoint,
        "stream": exchange.stream,
        "fingerprint": exchange.fingerprint,
        "prompt_text": None if exchange.prompt_text is None else dumps_json(exchange.prompt_text),
        "image_hashes": list(exchange.image_hashes),
        "tags": dict(exchange.tags),
        # the models themselves (RECORD_CONFIG), less what the blob holds
        "arms": dumps_json(arms, exclude=packed or None),
        "tokens": tokens,
    }


def _check_row_version(row: RowMapping) -> int:
    version = int(row["schema_version"])
    if version > SCHEMA_VERSION:
        raise StoreSchemaError(
            f"exchange {row['request_id']!r} has record schema version {version}; "
            f"this abserve reads versions up to {SCHEMA_VERSION}"
        )
    return version


def _arms_of_row(row: RowMapping) -> dict[str, ArmOutcome]:
    """The outcomes of a row: v2 (columnar: ``tokens`` set) or v1 (all in ``arms``)."""
    if row["tokens"] is None:
        return _ARMS.validate_json(row["arms"])
    return {name: arm.outcome() for name, arm in unpack(from_json(row["arms"]), row["tokens"]).items()}


def _columns_of_row(row: RowMapping) -> dict[str, ArmColumns]:
    if row["tokens"] is None:  # a v1 row: each arm all JSON, decoded, not validated
        return {name: ArmColumns(doc) for name, doc in from_json(row["arms"]).items()}
    return unpack(from_json(row["arms"]), row["tokens"])


def exchange_from_row(row: RowMapping) -> Exchange:
    """The exchange stored in one row; refuses rows of a newer record schema."""
    return Exchange(
        schema_version=_check_row_version(row),
        run_id=row["run_id"],
        request_id=row["request_id"],
        endpoint=row["endpoint"],
        stream=bool(row["stream"]),
        fingerprint=row["fingerprint"],
        prompt_text=None if row["prompt_text"] is None else json.loads(row["prompt_text"]),
        image_hashes=list(row["image_hashes"]),
        tags=dict(row["tags"]),
        started_at=float(row["started_at"]),
        arms=_arms_of_row(row),
    )


def raw_from_row(row: RowMapping) -> RawExchange:
    """The exchange of one row with its arms as columns, not validated (``RawExchange``);
    the caller has checked the record schema (``Store.iter_raw_exchanges``)."""
    return RawExchange(run_id=row["run_id"], request_id=row["request_id"],
                       schema_version=int(row["schema_version"]), endpoint=row["endpoint"],
                       stream=bool(row["stream"]), fingerprint=row["fingerprint"],
                       started_at=float(row["started_at"]), tags=dict(row["tags"]),
                       image_hashes=list(row["image_hashes"]), arms=_columns_of_row(row),
                       full=lambda: exchange_from_row(row),
                       prompt_text=None if row["prompt_text"] is None else json.loads(row["prompt_text"]))
