"""What ``abserve ledger`` reads: every run of one or more stores with its ledger entry, and the
accepted builds; the thin I/O shell under the site's pure views (``abserve.ledger.site_views``).

Every run of a store is read LEFT JOIN its ``abserve_ledger`` row, so a run without an entry
is a row too, marked with why (``running``, ``interrupted before its report``, ``no report``).
An entry is parsed as a ``LedgerEntry``; one of a newer ``schema_version`` is kept only by the
table's own columns (verdict, exit code, config) and marked ``written by a newer abserve``; one
that does not parse is marked ``unreadable ledger entry``. Nothing a store holds makes the
reader fail: only a store that cannot be opened does (``LedgerReadError``).

Without ``--db`` the stores are the SQLite files under the runs folder (``runs/``: one store a
run folder, ``runs/<id>/abserve.db``; ``abserve.store.found.sqlite_files``) that hold an
``abserve_runs`` table, each checked read-only first so a file that is not a store is never
changed; a run found in two stores is shown once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import from_json
from sqlalchemy import Engine, case, select
from sqlalchemy.exc import SQLAlchemyError

from abserve.ledger.entry import LEDGER_SCHEMA_VERSION, AcceptedBuild, LedgerEntry
from abserve.store import DEFAULT_STALE_AFTER_S, Store, StoreError
from abserve.store.found import sqlite_files
from abserve.store.owner import Owner, effective_status
from abserve.store.schema import accepted_table, ledger_table, runs_table
from abserve.store.urls import shown_url


class LedgerReadError(RuntimeError):
    """A store cannot be read: no such file, an unknown URL, a newer store layout."""


@dataclass(frozen=True)
class SignOff:
    """One run of the ledger: its entry when it has a usable one, else why not (``mark``)."""

    run_id: str
    store: str  # the store it was read from, as shown (no password)
    status: str  # the run's effective status: running / completed / interrupted
    started_at: float
    recorded_at: float  # the entry's time, else the run's start: the index's order
    config_name: str | None
    verdict: str | None  # from the ledger table's column: known even for a newer entry
    exit_code: int | None
    entry: LedgerEntry | None = None
    mark: str | None = None  # None: a usable entry
    report_dir: str | None = None  # where its report was written (a newer entry's too)


@dataclass
class SiteData:
    """Everything the site shows: sign-offs newest first, accepted builds newest first, and a
    line for each store or row that was left out."""

    signoffs: list[SignOff] = field(default_factory=list)
    accepted: list[AcceptedBuild] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)


def _no_entry_mark(status: str) -> str:
    if status == "running":
        return "running"
    if status == "interrupted":
        return "interrupted before its report"
    return "no report"


def _entry(text: str) -> tuple[LedgerEntry | None, str | None, str | None]:
    """The entry of a ledger row, or None and the mark saying why it cannot be shown; and its
    report folder (a newer entry's too, when it names one: its report is still linked)."""
    try:
        raw = from_json(text)
    except ValueError:
        return None, "unreadable ledger entry", None
    if not isinstance(raw, dict):
        return None, "unreadable ledger entry", None
    version, folder = raw.get("schema_version", LEDGER_SCHEMA_VERSION), raw.get("report_dir")
    folder = folder if isinstance(folder, str) else None
    if isinstance(version, int) and version > LEDGER_SCHEMA_VERSION:
        return None, f"written by a newer abserve (ledger entry version {version})", folder
    try:
        return LedgerEntry.model_validate(raw), None, folder
    except ValidationError:
        return None, "unreadable ledger entry", None


def _experiment(provenance: str | None) -> str | None:
    try:
        value = from_json(provenance or "{}").get("experiment")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def read_signoffs(engine: Engine, shown: str, stale_after_s: float = DEFAULT_STALE_AFTER_S) -> list[SignOff]:
    """Every run of the store at ``engine`` with its ledger entry (see the module docstring)."""
    runs, ledger = runs_table.c, ledger_table.c
    stmt = select(
        runs.run_id, runs.status, runs.started_at, runs.heartbeat_at, runs.owner_host, runs.owner_pid,
        runs.owner_started, ledger.recorded_at, ledger.config_name, ledger.verdict, ledger.exit_code,
        ledger.entry, case((ledger.run_id.is_(None), runs.provenance), else_=None).label("provenance"),
    ).select_from(runs_table.outerjoin(ledger_table, ledger.run_id == runs.run_id))
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    now, host = time.time(), Owner.current().host
    out = []
    for r in rows:
        owner = Owner(host=r.owner_host, pid=r.owner_pid, started=r.owner_started)
        status = effective_status(r.status, owner, heartbeat_at=r.heartbeat_at, now=now,
                                  stale_after_s=stale_after_s, this_host=host)
        if r.entry is None:
            out.append(SignOff(r.run_id, shown, status, r.started_at, r.started_at,
                               _experiment(r.provenance), None, None, mark=_no_entry_mark(status)))
            continue
        entry, mark, folder = _entry(r.entry)
        out.append(SignOff(r.run_id, shown, status, r.started_at, r.recorded_at,
                           entry.config_name if entry else r.config_name, r.verdict, r.exit_code,
                           entry=entry, mark=mark, report_dir=folder))
    return out


def read_accepted(engine: Engine) -> tuple[list[AcceptedBuild], int]:
    """The accepted builds of a store, and how many rows could not be read (a newer abserve's)."""
    with engine.connect() as conn:
        texts = conn.execute(select(accepted_table.c.accepted)).scalars().all()
    found, bad = [], 0
    for text in texts:
        try:
            found.append(AcceptedBuild.model_validate_json(text))
        except ValidationError:
            bad += 1
    return found, bad


def read_store(url: str, data: SiteData) -> None:
    """Add the runs and accepted builds of the store at ``url`` to ``data``; a run already there
    (the same run in two stores) is kept once, its entry preferred."""
    shown = shown_url(url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise LedgerReadError(f"no store at {url.removeprefix('sqlite:///')}")
    try:
        with Store.open(url) as store:
            signoffs = read_signoffs(store.engine, shown)
            accepted, bad = read_accepted(store.engine)
    except (StoreError, SQLAlchemyError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LedgerReadError(f"cannot read the store {shown}: {first}") from exc
    data.stores.append(shown)
    if bad:
        data.notes.append(f"{shown}: {bad} accepted build(s) written by a newer abserve left out")
    _merge(data, signoffs)
    known = {(a.config_name, a.name, a.run_id, a.accepted_at) for a in data.accepted}
    data.accepted += [a for a in accepted if (a.config_name, a.name, a.run_id, a.accepted_at) not in known]
    data.signoffs.sort(key=lambda s: (s.recorded_at, s.run_id), reverse=True)
    data.accepted.sort(key=lambda a: a.accepted_at, reverse=True)


def _merge(data: SiteData, signoffs: Iterable[SignOff]) -> None:
    where = {s.run_id: i for i, s in enumerate(data.signoffs)}
    for s in signoffs:
        i = where.get(s.run_id)
        if i is None:
            where[s.run_id] = len(data.signoffs)
            data.signoffs.append(s)
        elif data.signoffs[i].entry is None and s.entry is not None:
            data.signoffs[i] = s


def is_store(path: Path) -> bool:
    """Whether the SQLite file holds an ``abserve_runs`` table (read-only: nothing changed)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            conn.execute("SELECT 1 FROM abserve_runs LIMIT 1").fetchall()
    except sqlite3.Error:
        return False
    return True


def stores_under(runs: Path) -> list[Path]:
    """The abserve stores under the runs folder (``LedgerReadError`` when there is none)."""
    if not runs.is_dir():
        raise LedgerReadError(f"no --db given and no runs folder at {runs} to look in; pass --db URL")
    files = sqlite_files(runs)
    found = [p for p in files if is_store(p)]
    if not found:
        raise LedgerReadError(f"no abserve store under {runs} ({len(files)} SQLite files looked at); "
                              "pass --db URL")
    return found


def read_site(db: str | None, runs: Path) -> SiteData:
    """The ledger of the store ``db``, else of every store under ``runs``. With ``db`` any error is
    ``LedgerReadError``; under ``runs`` a store that cannot be read is a note, not an error."""
    data = SiteData()
    if db is not None:
        read_store(db, data)
        return data
    for path in stores_under(runs):
        try:
            read_store(f"sqlite:///{path.resolve()}", data)
        except LedgerReadError as exc:
            data.notes.append(f"left out: {exc}")
    if not data.stores:
        raise LedgerReadError(f"no store under {runs} could be read: " + "; ".join(data.notes))
    return data

