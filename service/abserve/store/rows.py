"""An exchange record as a row of ``abserve_exchanges``, and JSON text as the store keeps it.

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

from typing import Any

from pydantic_core import to_json

from abserve.model.records import ArmOutcome, Exchange
from abserve.model.token_lists import RoutedExchange
from abserve.model.token_pack import pack_arms, pack_tokens

Row = dict[str, Any]


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
