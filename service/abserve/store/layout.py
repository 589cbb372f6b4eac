"""The store's table layout on opening: create what is missing, check the layout's version,
and bring a store of an older version up to this one.

Store schema 1 -> 2 (record schema 2, ``abserve.model.token_columns``): ``abserve_exchanges``
gains the nullable ``tokens`` column; the v1 rows stay as they were (``tokens`` NULL, read
through the v1 reader, ``abserve.store.rows.exchange_from_row``). The step is idempotent
(the column is added only where absent, then the version recorded), so a process killed
between the two, or two processes opening one store at once, leave a store the next open
finishes. A store of a version this code does not know is refused, never guessed at.

Tables added since without changing an existing one (the release ledger's ``abserve_ledger``
and ``abserve_accepted``) need no version step: ``metadata.create_all`` creates what a store
lacks each time it opens, so an older store gains them and keeps its runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import Connection, Engine, insert, inspect, select, text, update
from sqlalchemy.exc import DBAPIError

from abserve.store.schema import STORE_SCHEMA_VERSION, exchanges_table, meta_table, metadata

MIGRATABLE = {1}  # older store schema versions this code brings up to STORE_SCHEMA_VERSION


class StoreError(Exception):
    """Base class of the store's own errors."""


class StoreSchemaError(StoreError):
    """The database or a record was written by a newer (or unknown) schema version."""


def ensure_schema(engine: Engine) -> None:
    """Check the store's schema version, migrate an older one, then create what is missing.

    Two processes may open a new store at once (router and orchestrator): the loser of a
    creation race gets a database error and simply tries again, finding the tables made.
    """
    for attempt in range(3):
        try:
            version = _check_version(engine)
            if version in MIGRATABLE:
                _migrate_from_v1(engine)
            metadata.create_all(engine, checkfirst=True)
            with engine.begin() as conn:
                if "schema_version" not in _read_meta(conn):
                    conn.execute(
                        insert(meta_table),
                        {"key": "schema_version", "value": str(STORE_SCHEMA_VERSION)},
                    )
            return
        except DBAPIError:
            if attempt == 2:
                raise
            time.sleep(0.2)


def _check_version(engine: Engine) -> int | None:
    """The store's schema version (None: a new store); refuses one this code cannot read."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(meta_table.name):
            return None
        version = _read_meta(conn).get("schema_version")
    if version is None:
        return None
    if not version.isdigit() or (int(version) != STORE_SCHEMA_VERSION and int(version) not in MIGRATABLE):
        raise StoreSchemaError(
            f"the store has schema version {version!r}; this abserve uses "
            f"{STORE_SCHEMA_VERSION} (and migrates {sorted(MIGRATABLE)}; no other migration exists)"
        )
    return int(version)


def _migrate_from_v1(engine: Engine) -> None:
    table = exchanges_table.name
    with engine.begin() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns(table)}
        if "tokens" not in columns:
            kind = "BYTEA" if engine.dialect.name == "postgresql" else "BLOB"
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN tokens {kind}"))
    with engine.begin() as conn:
        conn.execute(update(meta_table).where(meta_table.c.key == "schema_version")
                     .values(value=str(STORE_SCHEMA_VERSION)))


def _read_meta(conn: Connection) -> Mapping[str, str]:
    return {row.key: row.value for row in conn.execute(select(meta_table))}
