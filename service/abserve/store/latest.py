"""The newest run of a store and its exchanges: what the selftest, ``--rejudge`` and the
benchmark scripts read back after a run (one helper instead of a copy in each)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from abserve.model.records import Exchange, RunInfo


@dataclass(frozen=True)
class StoredRun:
    """A run as stored, with its exchanges (empty unless asked for)."""

    run: RunInfo
    exchanges: list[Exchange]


def database_url(db: str | Path) -> str:
    """A store URL for ``db``: a URL as given, a file path as an absolute SQLite URL."""
    text = str(db)
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"


def latest_run(db: str | Path, exchanges: bool = True) -> StoredRun | None:
    """The run that started last in ``db`` (a store URL or an SQLite file path), with its
    exchanges when ``exchanges``; None when the store holds no run."""
    from abserve.store import Store

    with Store.open(database_url(db)) as store:
        runs = store.list_runs()  # oldest first
        if not runs:
            return None
        run = max(runs, key=lambda r: r.started_at)
        return StoredRun(run, list(store.iter_exchanges(run.run_id)) if exchanges else [])
