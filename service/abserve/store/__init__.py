"""The record store: runs and exchanges persisted through SQLAlchemy 2.

``Store`` (``store.py``) reads and writes runs and exchanges in SQLite (default, WAL) or
PostgreSQL; ``BatchWriter`` (``writer.py``) batches the router's writes off the request
path and keeps the run's heartbeat; ``schema.py`` holds the versioned tables and
``owner.py`` decides when a ``running`` run is in fact ``interrupted``; ``resume.py`` when a
restarted router may reopen its stopped run (``Store.resume_run``).
"""

from abserve.store.errors import RunConfigError, RunExistsError, RunInUseError, RunNotFoundError
from abserve.store.layout import StoreError, StoreSchemaError
from abserve.store.schema import STORE_SCHEMA_VERSION
from abserve.store.store import DEFAULT_STALE_AFTER_S, Store
from abserve.store.writer import BatchWriter

__all__ = [
    "DEFAULT_STALE_AFTER_S",
    "STORE_SCHEMA_VERSION",
    "BatchWriter",
    "RunConfigError",
    "RunExistsError",
    "RunInUseError",
    "RunNotFoundError",
    "Store",
    "StoreError",
    "StoreSchemaError",
]
