"""An exchange record as a row of ``abserve_exchanges``, and JSON text as the store keeps it.

Pure functions, no I/O. ``exchange_row`` is called by ``BatchWriter.put`` in the router's
event loop, one record at a time as each exchange ends, not by the writer thread for a
whole batch at once: a batch serialised on the writer thread held the GIL for milliseconds
while the loop waited, every flush (the router's p99 latency at 1 stream came in bursts at
the flush interval; ``benchmarks/router_overhead.md``).
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from abserve.records import Exchange

Row = dict[str, Any]


def dumps_json(value: Any) -> str:
    """JSON text that keeps ``inf``/``nan`` (as JavaScript constants) and escapes NUL."""
    return to_json(value, inf_nan_mode="constants").decode()


def exchange_row(exchange: Exchange) -> Row:
    """The ``abserve_exchanges`` row of one exchange."""
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
        "arms": dumps_json(exchange.arms),  # the models themselves: no dict copy (RECORD_CONFIG)
    }
