"""Tables of the record store, and the engine that reaches them.

Layout (store schema version ``STORE_SCHEMA_VERSION``, kept in ``abserve_meta``):

- ``abserve_runs``: one row per run. Its config, provenance and arm provenance are JSON
  documents; ``heartbeat_at``/``owner_*`` say which process is writing it and when it last
  proved it was alive (see ``abserve.store.owner``).
- ``abserve_exchanges``: one row per exchange. The bits a query filters or sorts on are
  columns (run id, request id, start time, fingerprint, endpoint, record schema version,
  tags as JSON: ``json``, not ``jsonb``, on PostgreSQL, so keys keep their order). The
  per-arm outcomes are in the row, not a child table: the judgment always reads an exchange
  with all its arms, and one row per exchange keeps a batch insert one statement. Since
  store schema 2 (record schema 2) an outcome's token-level data (token ids and times,
  logprobs, top-k, prompt logprobs, text) is one packed, compressed blob per exchange in
  ``tokens`` (``abserve.model.token_columns``: parallel arrays, ~15x smaller than JSON objects
  per position) and ``arms`` holds the rest of each outcome as JSON text. A row with no
  ``tokens`` is a v1 row: everything in ``arms``. The JSON is written by pydantic-core
  with ``Infinity``/``NaN`` constants, which JSON/JSONB columns would refuse. (pydantic-core
  rather than the json module: ~4x faster, and the writer thread holds the GIL the router
  also needs.) A v1 store gains the ``tokens`` column when opened (``abserve.store.layout``).
- ``abserve_ledger``: the release ledger, one entry per reported run (``abserve.ledger``: written
  with every report, replaced when the run is reported again; the entry is a JSON document, its
  config name, verdict and exit code also columns to filter on). ``abserve_accepted``: each
  ``abserve accept``, one row per accepted build (no foreign key: an accepted build outlives its
  run). Both are created when a store opens, so a store written before them gains them (no
  version step: the tables are new, nothing in the old ones changes).

Engine: SQLite gets WAL (readers never block the writer thread and a killed writer never
leaves a torn database), ``synchronous=NORMAL`` (in WAL mode a commit is in the WAL file
before the call returns, so a SIGKILL loses nothing committed; only an OS crash or power
cut can lose the last commits, never consistency; ``fsync=True`` makes it ``FULL``: an
fsync per commit, for power-loss durability), ``busy_timeout`` (concurrent readers/writers
wait instead of failing) and foreign keys. PostgreSQL is used as it comes, through psycopg 3.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Double,
    Engine,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

STORE_SCHEMA_VERSION = 2

SQLITE_BUSY_TIMEOUT_MS = 10_000

metadata = MetaData()


meta_table = Table(
    "abserve_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

runs_table = Table(
    "abserve_runs",
    metadata,
    Column("run_id", String(128), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("started_at", Double, nullable=False),
    Column("ended_at", Double, nullable=True),
    Column("config", Text, nullable=False),
    Column("provenance", Text, nullable=False),
    Column("arms", Text, nullable=False),
    Column("heartbeat_at", Double, nullable=False),
    Column("owner_host", String(255), nullable=False),
    Column("owner_pid", Integer, nullable=False),
    Column("owner_started", Double, nullable=True),  # process create time: guards PID reuse
)

exchanges_table = Table(
    "abserve_exchanges",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "run_id",
        String(128),
        ForeignKey("abserve_runs.run_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("request_id", String(128), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("endpoint", String(32), nullable=False),
    Column("stream", Boolean, nullable=False),
    Column("fingerprint", String(128), nullable=False),
    Column("prompt_text", Text, nullable=True),  # a JSON string: PostgreSQL text refuses NUL
    Column("image_hashes", JSON, nullable=False),
    Column("tags", JSON, nullable=False),
    Column("arms", Text, nullable=False),  # {arm name: ArmOutcome} as JSON, less what ``tokens`` holds
    Column("tokens", LargeBinary, nullable=True),  # the arms' packed token columns; NULL: a v1 row
    UniqueConstraint("run_id", "request_id", name="uq_abserve_exchange_request"),
    Index("ix_abserve_exchanges_run_started", "run_id", "started_at", "id"),
    Index("ix_abserve_exchanges_fingerprint", "fingerprint"),
)


ledger_table = Table(
    "abserve_ledger",
    metadata,
    Column("run_id", String(128), ForeignKey("abserve_runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("recorded_at", Double, nullable=False),
    Column("config_name", String(256), nullable=True),
    Column("verdict", String(16), nullable=False),
    Column("exit_code", Integer, nullable=False),
    Column("entry", Text, nullable=False),  # abserve.ledger.entry.LedgerEntry as JSON
    Index("ix_abserve_ledger_recorded", "recorded_at"),
)

accepted_table = Table(
    "abserve_accepted",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(256), nullable=False),
    Column("config_name", String(256), nullable=False),
    Column("run_id", String(128), nullable=False),  # no foreign key: an accepted build outlives its run
    Column("accepted_at", Double, nullable=False),
    Column("accepted", Text, nullable=False),  # abserve.ledger.entry.AcceptedBuild as JSON
    Index("ix_abserve_accepted_config", "config_name", "accepted_at"),
)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any, *, fsync: bool = False) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def make_engine(database_url: str, *, fsync: bool = False) -> Engine:
    """An engine for ``database_url``: ``sqlite:///FILE`` or ``postgresql+psycopg://...``.
    ``fsync``: SQLite syncs the WAL on every commit (``synchronous=FULL``: a commit survives
    a power cut, at the cost of an fsync each); PostgreSQL follows its server's settings.

    Any ``postgresql`` URL is driven by psycopg 3 (the driver abserve installs). In-memory
    SQLite is refused: the writer thread and readers need one shared database.
    """
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {database_url!r}") from exc
    backend = url.get_backend_name()
    if backend == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError("in-memory SQLite is not supported by the store; use sqlite:///path/to/file.db")
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", partial(_sqlite_pragmas, fsync=fsync))
        return engine
    if backend == "postgresql":
        if url.drivername != "postgresql+psycopg":
            url = url.set(drivername="postgresql+psycopg")
        return create_engine(url, pool_pre_ping=True)
    raise ValueError(
        f"unsupported database_url scheme {url.drivername!r}: "
        "use sqlite:///FILE or postgresql+psycopg://USER@HOST:PORT/DB"
    )
