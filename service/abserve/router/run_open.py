"""The router's run in the store at start: created, or reopened after a restart.

A router (or the supervisor of several, ``router.workers``) creates its run at start. Under
a fixed run id (``docker compose``: ``ABSERVE_ROUTER_RUN_ID``) a restarted router finds its
run already there: without the ``resume`` setting that is ``RunExistsError``, as a run id
must not be reused by accident; with it the run is reopened (``Store.resume_run``), the
exchanges already stored kept, and the restart recorded in the run's provenance for the
report. A new run is created with what the launcher knew of it at the start
(``RouterSettings.run_provenance``: the policy ``abserve run`` judges it with). A run still
written by a live router is never reopened; one whose owner is on another host is known dead
only once its heartbeat is stale, so the router waits that long before giving up.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from abserve.model.provenance import RunProvenance
from abserve.model.records import RunInfo
from abserve.store import RunExistsError, RunInUseError, Store

log = logging.getLogger("abserve.router")
RETRY_S = 0.5  # between two attempts on a run whose owner may have died on another host


def open_run(store: Store, run_id: str, config: dict[str, Any], resume: bool,
             provenance: RunProvenance | None = None) -> None:
    """Create run ``run_id`` owned by this process, with ``provenance`` (what the launcher
    knew at the start: the run's policy); with ``resume``, reopen it if it exists (its
    provenance as recorded).
    Raises ``RunExistsError`` (no ``resume``), ``RunInUseError`` (another router writes it)
    or ``RunConfigError`` (recorded with other arms, URLs, primary or request settings)."""
    deadline = time.monotonic() + store.stale_after_s + 1.0
    while True:
        try:
            store.create_run(RunInfo(run_id=run_id, started_at=time.time(), config=config,
                                     provenance=provenance or RunProvenance()))
            return
        except RunExistsError:
            if not resume:
                raise
        try:
            restarts = store.resume_run(run_id, config)
        except RunInUseError as exc:
            if exc.owner_known_alive or time.monotonic() > deadline:
                raise
            log.warning("%s; retrying", exc)
            time.sleep(RETRY_S)
            continue
        log.warning("run %s resumed after a router restart (restart %d of this run)", run_id,
                    restarts)
        return
