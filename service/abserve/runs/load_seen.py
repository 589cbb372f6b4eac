"""The load's own records against the store: nothing the clients received may be missing.

Every Locust process of ``abserve run`` writes one line per request it completed
(``traffic/timing.py``: ``timings-<node>.jsonl`` under ``<out>/load/``), with the router's
request id (its ``x-abserve-request-id`` response header). After the router stopped, the
answers the clients received in full (no error: the last byte of the stream, ``[DONE]``, or a
whole JSON body) are looked up in the store by that id. An answer a client received that the
store lacks makes the run invalid (``compare.verdict.invalid_reasons``) instead of a verdict on
fewer exchanges than the load saw. The count goes into the run's provenance (``load_seen``),
where the judgment and the report read it; runs without load records (by hand, older stores)
have none, and their report says the count was not available.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

import orjson
from pydantic import ValidationError

from abserve.model.provenance import LoadSeenRecord
from abserve.traffic.timing import TimingRecord

FIRST_MISSING = 5  # request ids named in the provenance; the rest are counted


def timing_files(load_dir: Path) -> list[Path]:
    """Every Locust process's own timing file under ``load_dir`` (the per-process parts, not
    the merged copy: a load whose runner was killed left only its parts)."""
    return sorted(load_dir.rglob("timings-*.jsonl")) if load_dir.is_dir() else []


def read_records(files: Iterable[Path]) -> Iterator[TimingRecord]:
    """The records of ``files``; a line cut short (a load process killed while writing it)
    is skipped: that request's answer was not recorded as received either."""
    for path in files:
        with path.open("rb") as fh:
            for line in fh:
                try:
                    yield TimingRecord.model_validate(orjson.loads(line))
                except (orjson.JSONDecodeError, ValidationError):
                    continue


def count_seen(records: Iterable[TimingRecord], run_id: str,
               stored: Callable[[Collection[str]], set[str]]) -> LoadSeenRecord:
    """Seen, stored and missing among ``run_id``'s answers received in full; ``stored`` says
    which of the given request ids the store holds."""
    ids: list[str] = []
    without_id = 0
    for record in records:
        if record.run_id != run_id or not record.ok or record.status != 200:
            continue
        if record.router_request_id:
            ids.append(record.router_request_id)
        else:
            without_id += 1
    unique = sorted(set(ids))
    found = stored(unique)
    missing = [i for i in unique if i not in found]
    return LoadSeenRecord(seen=len(unique), stored=len(unique) - len(missing), missing=len(missing),
                          without_id=without_id, first_missing=missing[:FIRST_MISSING])


def record_load_seen(database_url: str, run_id: str, load_dir: Path) -> LoadSeenRecord | None:
    """Count the load's answers against the store and write the count into the run's
    provenance; None (nothing written) where the load left no records."""
    from abserve.store import Store
    from abserve.store.request_ids import stored_request_ids

    files = timing_files(load_dir)
    if not files:
        return None
    with Store.open(database_url) as store:
        run = store.get_run(run_id)
        if run is None:
            return None
        seen = count_seen(read_records(files), run_id,
                          lambda ids: stored_request_ids(store, run_id, ids))
        run.provenance.load_seen = seen
        store.update_run(run)
    return seen
