"""Which of a set of request ids a run's store holds: the check of the load's own records
against the store (``abserve.runs.load_seen``). The ids are looked up in chunks through the
``(run_id, request_id)`` unique index, so a run of any size is checked without reading its
exchanges."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select

from abserve.store.schema import exchanges_table
from abserve.store.store import Store

CHUNK = 500  # ids per query: well under SQLite's limit on bound parameters


def stored_request_ids(store: Store, run_id: str, request_ids: Collection[str]) -> set[str]:
    """The ids of ``request_ids`` that the run ``run_id`` has an exchange for."""
    wanted = sorted(set(request_ids))
    cols = exchanges_table.c
    found: set[str] = set()
    with store.engine.connect() as conn:
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start:start + CHUNK]
            found.update(conn.execute(select(cols.request_id).where(
                cols.run_id == run_id, cols.request_id.in_(chunk))).scalars())
    return found
