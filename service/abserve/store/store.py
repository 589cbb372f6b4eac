"""The record store: runs and their exchanges, in SQLite (default) or PostgreSQL.

``Store`` is the thin I/O shell around the tables of ``abserve.store.schema``: it turns
``RunInfo``/``Exchange`` models into rows and back, exactly (floats, ``-inf`` logprobs and
all). It is synchronous and thread-safe (SQLAlchemy's pool); the router never calls its
writes on the request path but through ``BatchWriter``. Readers get a run's *effective*
status: a run whose writer died is reported ``interrupted`` (``abserve.store.owner``).

Two schema versions are checked: the store's table layout (``abserve_meta``) when opening
(an older layout this code knows is migrated: ``abserve.store.layout``), and each record's
``Exchange.schema_version`` when reading; newer than this code knows is refused with
``StoreSchemaError`` rather than misread. A row's token-level data is read from its packed
columns (record schema 2, ``abserve.model.token_columns``) or, in a v1 row, from its JSON.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    RowMapping,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError

from abserve.model.provenance import RouterRestart, RunProvenance
from abserve.model.records import (
    ROUTER_RESTARTS_KEY,
    SCHEMA_VERSION,
    Exchange,
    RunInfo,
)
from abserve.model.token_columns import RawExchange
from abserve.store.errors import RunConfigError, RunExistsError, RunInUseError, RunNotFoundError
from abserve.store.layout import StoreSchemaError, ensure_schema
from abserve.store.owner import Owner, effective_status, owner_alive
from abserve.store.resume import config_conflicts
from abserve.store.rows import Row, dumps_json, exchange_from_row, exchange_row, raw_from_row
from abserve.store.schema import exchanges_table, make_engine, runs_table

T = TypeVar("T")
DEFAULT_STALE_AFTER_S = 10.0
# Provenance recorded as the run is created (its policy): no later writer replaces it
START_KEYS = ("policy", "policy_file", "policy_sha256")
_PAGE = 256


def _run_docs(run: RunInfo) -> dict[str, str]:
    dumped = run.model_dump(mode="json", include={"config", "provenance", "arms"})
    return {key: dumps_json(dumped[key]) for key in ("config", "provenance", "arms")}


class Store:
    """Runs and exchanges in one database. Open with ``Store.open(database_url)``, as a context
    manager (``with Store.open(url) as store:``) where the store lives for one block."""

    def __init__(self, engine: Engine, *, stale_after_s: float = DEFAULT_STALE_AFTER_S) -> None:
        self.engine = engine
        self.stale_after_s = stale_after_s
        self._host = socket.gethostname()

    @classmethod
    def open(cls, database_url: str, *, stale_after_s: float = DEFAULT_STALE_AFTER_S,
             fsync: bool = False) -> Store:
        """Connect, create the tables if absent, and check the store's schema version;
        ``fsync``: every SQLite commit synced to disk (``schema.make_engine``)."""
        if stale_after_s <= 0:
            raise ValueError("stale_after_s must be positive")
        engine = make_engine(database_url, fsync=fsync)
        try:
            ensure_schema(engine)
        except Exception:
            engine.dispose()
            raise
        return cls(engine, stale_after_s=stale_after_s)

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        """``with Store.open(url) as store:`` closes the store however the block ends."""
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------------

    def create_run(self, run: RunInfo) -> None:
        """Insert a run, owned by this process with a fresh heartbeat."""
        owner = Owner.current()
        row = {
            "run_id": run.run_id,
            "status": run.status,
            "started_at": run.started_at,
            "ended_at": run.ended_at,
            **_run_docs(run),
            "heartbeat_at": time.time(),
            "owner_host": owner.host,
            "owner_pid": owner.pid,
            "owner_started": owner.started,
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(runs_table), row)
        except IntegrityError as exc:
            raise RunExistsError(f"run {run.run_id!r} already exists") from exc

    def update_run(self, run: RunInfo) -> None:
        """Replace a run's config, provenance and arm provenance (status is untouched). The
        router's restarts (``provenance.router_restarts``) are ``resume_run``'s to
        append: the stored list is kept, so a writer that read the run before a restart
        cannot drop it. The policy recorded when the run was created (``START_KEYS``) is kept
        too: the run's policy is fixed from its start."""
        with self.engine.begin() as conn:
            stored = conn.execute(
                select(runs_table.c.provenance).where(runs_table.c.run_id == run.run_id)
            ).scalar()
            if stored is None:
                raise RunNotFoundError(run.run_id)
            kept = _kept(RunProvenance.model_validate_json(stored), run.provenance)
            if kept:
                run = run.model_copy(update={"provenance": run.provenance.model_copy(update=kept)})
            conn.execute(
                update(runs_table).where(runs_table.c.run_id == run.run_id).values(_run_docs(run))
            )

    def resume_run(self, run_id: str, config: Mapping[str, Any]) -> int:
        """Reopen a stopped run for a restarted router (its ``resume`` setting); returns how
        many times the run has been resumed, this time included.

        In one transaction: refuses a run that is effectively ``running`` (``RunInUseError``:
        two routers must never write one run) or whose recorded config differs from
        ``config`` in anything that matters (``RunConfigError``; ``store.resume``); else
        sets it ``running`` without an end time, claims it with a fresh heartbeat (as
        ``create_run``) and appends a restart to ``provenance.router_restarts``. The
        recorded config and the exchanges stay as they are. ``RunNotFoundError`` if absent.
        """
        cols = runs_table.c
        with self.engine.begin() as conn:
            row = conn.execute(select(runs_table).where(cols.run_id == run_id).with_for_update()).first()
            if row is None:
                raise RunNotFoundError(run_id)
            stored = row._mapping
            previous = self._run_from_row(stored).status
            if previous == "running":
                raise self._in_use(stored)
            problems = config_conflicts(json.loads(stored["config"]), config)
            if problems:
                raise RunConfigError(f"run {run_id!r} was recorded with another router config: "
                                     + "; ".join(problems))
            provenance = RunProvenance.model_validate_json(stored["provenance"])
            now, owner = time.time(), Owner.current()
            restart = RouterRestart(at=now, previous_status=previous, exchanges_before=_count(conn, run_id))
            provenance.router_restarts = done = [*provenance.router_restarts, restart]
            written = dumps_json(provenance.model_dump(mode="json"))
            result = conn.execute(
                update(runs_table)
                .where(cols.run_id == run_id, cols.status == stored["status"],
                       cols.heartbeat_at == stored["heartbeat_at"],
                       cols.owner_host == stored["owner_host"], cols.owner_pid == stored["owner_pid"])
                .values(status="running", ended_at=None, provenance=written,
                        heartbeat_at=now, owner_host=owner.host, owner_pid=owner.pid,
                        owner_started=owner.started)
            )
            if result.rowcount != 1:  # SQLite has no SELECT ... FOR UPDATE: a racer got there first
                raise RunInUseError(f"run {run_id!r} changed while being resumed: another "
                                    "process resumed or wrote it", owner_known_alive=False)
        return len(done)

    def _in_use(self, stored: RowMapping) -> RunInUseError:
        owner = Owner(host=stored["owner_host"], pid=stored["owner_pid"], started=stored["owner_started"])
        age = time.time() - float(stored["heartbeat_at"])
        return RunInUseError(
            f"run {stored['run_id']!r} is still running (owner {owner.host} pid {owner.pid}, "
            f"heartbeat {age:.1f} s ago): two routers must never write one run; stop the other "
            f"one first (a dead owner on another host is seen after {self.stale_after_s:g} s)",
            owner_known_alive=owner_alive(owner, self._host) is True,
        )

    def finish_run(self, run_id: str, status: Literal["completed", "interrupted"]) -> None:
        """Mark a run ``completed`` or ``interrupted`` and stamp its end time."""
        if status not in ("completed", "interrupted"):
            raise ValueError(f"a run finishes as 'completed' or 'interrupted', not {status!r}")
        with self.engine.begin() as conn:
            result = conn.execute(
                update(runs_table)
                .where(runs_table.c.run_id == run_id)
                .values(status=status, ended_at=time.time())
            )
            if result.rowcount == 0:
                raise RunNotFoundError(run_id)

    def heartbeat(self, run_id: str, conn: Connection | None = None, *, claim: bool = True) -> None:
        """Record that this process is alive and (with ``claim``) owns ``run_id``'s writes.
        A router worker of several heartbeats without claiming: the run's owner stays the
        supervisor that created it (``router.workers``)."""
        values: dict[str, Any] = {"heartbeat_at": time.time()}
        if claim:
            owner = Owner.current()
            values.update(owner_host=owner.host, owner_pid=owner.pid, owner_started=owner.started)
        stmt = update(runs_table).where(runs_table.c.run_id == run_id).values(values)
        if conn is not None:
            conn.execute(stmt)
            return
        with self.engine.begin() as own:
            own.execute(stmt)

    def get_run(self, run_id: str) -> RunInfo | None:
        """The run with its effective status, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(runs_table).where(runs_table.c.run_id == run_id)).first()
        return None if row is None else self._run_from_row(row._mapping)

    def list_runs(self) -> list[RunInfo]:
        """All runs, oldest first, with effective statuses."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs_table).order_by(runs_table.c.started_at, runs_table.c.run_id)
            ).all()
        return [self._run_from_row(row._mapping) for row in rows]

    def _run_from_row(self, row: RowMapping) -> RunInfo:
        owner = Owner(host=row["owner_host"], pid=row["owner_pid"], started=row["owner_started"])
        status = effective_status(
            row["status"],
            owner,
            heartbeat_at=row["heartbeat_at"],
            now=time.time(),
            stale_after_s=self.stale_after_s,
            this_host=self._host,
        )
        return RunInfo(
            run_id=row["run_id"],
            status=status,
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            config=json.loads(row["config"]),
            provenance=json.loads(row["provenance"]),
            arms=json.loads(row["arms"]),
        )

    # -- exchanges ------------------------------------------------------------------

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """Insert exchanges in one transaction (all or none)."""
        if not exchanges:
            return
        with self.engine.begin() as conn:
            self.insert_exchanges(conn, exchanges)

    def insert_exchanges(self, conn: Connection, exchanges: Sequence[Exchange]) -> None:
        """Insert exchanges inside the caller's transaction."""
        self.insert_rows(conn, [exchange_row(e) for e in exchanges])

    def insert_rows(self, conn: Connection, rows: Sequence[Row]) -> None:
        """Insert exchanges already made rows (``rows.exchange_row``) in the caller's
        transaction."""
        if rows:
            conn.execute(insert(exchanges_table), rows)

    def iter_exchanges(self, run_id: str) -> Iterator[Exchange]:
        """A run's exchanges ordered by ``started_at``, read page by page.

        Raises ``StoreSchemaError`` before yielding anything if any record of the run has a
        newer record schema than this code.
        """
        self._check_records(run_id)
        return self._pages(run_id)

    def iter_new_exchanges(self, run_id: str, after_row: int = 0) -> Iterator[tuple[int, Exchange]]:
        """``iter_new_raw_exchanges``, validated: each stored exchange after row ``after_row``."""
        for row, raw in self.iter_new_raw_exchanges(run_id, after_row):
            yield row, raw.full()

    def iter_new_raw_exchanges(self, run_id: str, after_row: int = 0) -> Iterator[tuple[int, RawExchange]]:
        """The exchanges stored after row ``after_row`` (0: all), in row order, page by page,
        each with its row id: a sequential run's look reads only what the last round added
        (pass the largest row id seen). Rows are numbered as they commit on SQLite; on
        PostgreSQL a transaction still open while a later one commits could be passed over,
        so call this once the round's exchanges are all recorded (``wait_recorded``)."""
        self._check_records(run_id)
        cols = exchanges_table.c
        while True:
            stmt = (select(exchanges_table).where(cols.run_id == run_id, cols.id > after_row)
                    .order_by(cols.id).limit(_PAGE))
            with self.engine.connect() as conn:
                rows = [row._mapping for row in conn.execute(stmt)]
            for row in rows:
                yield int(row["id"]), raw_from_row(row)
            if len(rows) < _PAGE:
                return
            after_row = int(rows[-1]["id"])

    def count_exchanges_through(self, run_id: str, through_row: int) -> int:
        """How many of the run's exchanges have a row id up to ``through_row``: a look that has
        read every row up to there compares this with what it read, so a row that took its id
        before a later one but committed after it (PostgreSQL) is seen at the next look."""
        cols = exchanges_table.c
        with self.engine.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(exchanges_table)
                .where(cols.run_id == run_id, cols.id <= through_row)
            ).scalar_one())

    def iter_missing_raw_exchanges(self, run_id: str, through_row: int,
                                   known: Container[str]) -> Iterator[tuple[int, RawExchange]]:
        """The run's exchanges with a row id up to ``through_row`` whose request id is not in
        ``known`` (what a look has already read), with their row ids: only the ids and request
        ids of the run are scanned, then the missing rows read in full."""
        self._check_records(run_id)
        cols = exchanges_table.c
        missing: list[int] = []
        after = 0
        while True:
            stmt = (select(cols.id, cols.request_id)
                    .where(cols.run_id == run_id, cols.id > after, cols.id <= through_row)
                    .order_by(cols.id).limit(_PAGE * 16))
            with self.engine.connect() as conn:
                keys = conn.execute(stmt).all()
            missing += [int(row_id) for row_id, request_id in keys if request_id not in known]
            if len(keys) < _PAGE * 16:
                break
            after = int(keys[-1][0])
        for start in range(0, len(missing), _PAGE):
            chunk = missing[start:start + _PAGE]
            with self.engine.connect() as conn:
                rows = [row._mapping for row in conn.execute(
                    select(exchanges_table).where(cols.id.in_(chunk)).order_by(cols.id))]
            for row in rows:
                yield int(row["id"]), raw_from_row(row)

    def iter_raw_exchanges(self, run_id: str) -> Iterator[RawExchange]:
        """``iter_exchanges`` without validating the token-level data (``RawExchange``)."""
        self._check_records(run_id)
        return self._pages(run_id, raw_from_row)

    def _check_records(self, run_id: str) -> None:
        newest = self._newest_record_version(run_id)
        if newest is not None and newest > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"run {run_id!r} holds records of schema version {newest}; "
                f"this abserve reads versions up to {SCHEMA_VERSION}"
            )

    def _pages(self, run_id: str, make: Callable[[RowMapping], T] = exchange_from_row) -> Iterator[T]:  # type: ignore[assignment]
        cols = exchanges_table.c
        after: tuple[float, int] | None = None
        while True:
            stmt = select(exchanges_table).where(cols.run_id == run_id)
            if after is not None:
                stmt = stmt.where(tuple_(cols.started_at, cols.id) > after)
            stmt = stmt.order_by(cols.started_at, cols.id).limit(_PAGE)
            with self.engine.connect() as conn:
                rows = [row._mapping for row in conn.execute(stmt)]
            for row in rows:
                yield make(row)
            if len(rows) < _PAGE:
                return
            after = (rows[-1]["started_at"], rows[-1]["id"])

    def count_exchanges(self, run_id: str) -> int:
        with self.engine.connect() as conn:
            return _count(conn, run_id)

    def _newest_record_version(self, run_id: str) -> int | None:
        with self.engine.connect() as conn:
            value = conn.execute(
                select(func.max(exchanges_table.c.schema_version)).where(exchanges_table.c.run_id == run_id)
            ).scalar()
        return None if value is None else int(value)


def _kept(stored: RunProvenance, new: RunProvenance) -> dict[str, Any]:
    """What ``update_run`` keeps of the stored provenance over ``new``: the router's restarts,
    and the start keys the run was created with (the policy the run is judged with)."""
    kept: dict[str, Any] = {key: getattr(stored, key) for key in START_KEYS
                            if getattr(stored, key) is not None and getattr(new, key) != getattr(stored, key)}
    if ROUTER_RESTARTS_KEY in stored.model_fields_set:
        kept[ROUTER_RESTARTS_KEY] = stored.router_restarts
    return kept


def _count(conn: Connection, run_id: str) -> int:
    return int(conn.execute(
        select(func.count()).select_from(exchanges_table).where(exchanges_table.c.run_id == run_id)
    ).scalar_one())
