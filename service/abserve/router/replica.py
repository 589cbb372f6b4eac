"""``abserve router --join``: one more router replica of a run, on any host.

One router process uses one core, and ``--workers N`` spreads a run over the cores of one
host. Beyond one host, router replicas on several hosts serve one run in one PostgreSQL store:
the first (``abserve router`` as usual) creates and owns the run; each other replica joins it
(``abserve router --join`` with the same settings file, its own ``host``/``port``). A joined
replica waits (``JOIN_WAIT_S``) for the run to exist and be running, refuses one recorded with
other arms or another primary, and then serves exactly as a router worker does (``own_run``
False: it writes the exchanges it answered, heartbeats without claiming the run, never
creates or finishes it). The load spreads over the replicas (``abserve load --also-host``;
``abserve run``: ``load.replicas``).

Without a settings file (``abserve router --join --db URL --run-id ID``) a replica takes the
settings the run was created with from the store (``settings_from_store``: everything the run
recorded, secrets excepted; its own ``host``/``port``; the API key from
``ABSERVE_ROUTER_API_KEY``), so a router host needs only abserve, the store's address and the
run id, e.g. for the run ``abserve run --run-id ID --db URL`` starts.

Each replica fans every request it receives out to every arm and acknowledges an exchange
only once it is stored (``acknowledge: stored``, the default), so whatever any replica
acknowledged is in the store, whichever replica dies later. The run as a whole:

- a joined replica killed mid-run: the run goes on (its exchanges acknowledged so far are
  stored; requests in flight on it fail at the client and are not exchanges of the run, and
  the load sends the next ones to the other replicas); the run completes when its owner stops;
- the owner killed mid-run: the run reads ``interrupted`` once nothing heartbeats it (the
  joined replicas stop with it, or their heartbeat goes stale after they stop), and is judged
  invalid, as a single router's would be.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from abserve.router.serve import StartupError, run_app
from abserve.router.settings import RouterSettings, load_settings

log = logging.getLogger("abserve.router")
JOIN_WAIT_S = 60.0  # how long a joining replica waits for the owner to create the run
SHARED_KEYS = ("arms", "primary")  # what every replica of one run must agree on


def check_joinable(settings: RouterSettings) -> None:
    """Refuse settings a replica cannot join with (ValueError: a usage error)."""
    if not (settings.database_url or "").startswith("postgresql"):
        raise ValueError("--join needs a PostgreSQL database_url shared by every replica "
                         "(a SQLite file is one host's)")
    if settings.resume:
        raise ValueError("--join writes into the owner's run: resume is the owner's setting")


def wait_for_run(settings: RouterSettings, wait_s: float = JOIN_WAIT_S) -> None:
    """Return once the run exists, is running and was recorded with these arms and primary;
    ``StartupError`` otherwise (after ``wait_s`` when it does not exist yet)."""
    from abserve.store import Store

    mine = settings.public_config()
    deadline = time.monotonic() + wait_s
    with Store.open(settings.effective_database_url) as store:
        while (run := store.get_run(settings.run_id)) is None:
            if time.monotonic() > deadline:
                raise StartupError(f"run {settings.run_id} was not created within {wait_s:.0f} s: "
                                   "start its first router (without --join) first")
            time.sleep(0.5)
    if run.status != "running":
        raise StartupError(f"run {settings.run_id} is {run.status}: a replica joins a running run")
    differ = [key for key in SHARED_KEYS if run.config.get(key) != mine[key]]
    if differ:
        raise StartupError(f"run {settings.run_id} was recorded with other {' and '.join(differ)}: "
                           "every replica of a run takes the same settings file")


def settings_from_store(database_url: str, run_id: str, overrides: dict[str, Any],
                        wait_s: float = JOIN_WAIT_S) -> RouterSettings:
    """The settings run ``run_id`` was created with, read from the store once it exists
    (``StartupError`` after ``wait_s``), with this host's ``overrides`` (host, port)."""
    from abserve.store import Store

    deadline = time.monotonic() + wait_s
    with Store.open(database_url) as store:
        while (run := store.get_run(run_id)) is None:
            if time.monotonic() > deadline:
                raise StartupError(f"run {run_id} was not created within {wait_s:.0f} s: start "
                                   "its first router (or abserve run --run-id) first")
            time.sleep(0.5)
    recorded = {k: v for k, v in run.config.items() if k not in ("host", "port", "workers")}
    return RouterSettings(**{**recorded, "database_url": database_url, "run_id": run_id,
                             **overrides})


def serve_replica(config: Path | None, overrides: dict[str, Any], wait_s: float = JOIN_WAIT_S,
                  database_url: str | None = None) -> None:
    """Serve as one more replica of the run the settings name (see the module docstring):
    from a settings file, or (``config`` None) from what the run recorded in the store at
    ``database_url`` (``overrides`` then names the run: ``run_id``)."""
    if config is None:
        if not database_url or "run_id" not in overrides:
            raise ValueError("--join without --config needs --db and --run-id")
        settings = settings_from_store(database_url, overrides["run_id"], overrides, wait_s)
    else:
        settings = load_settings(config, **overrides)
    check_joinable(settings)
    wait_for_run(settings, wait_s)
    log.info("router replica: joining run %s on %s:%d", settings.run_id, settings.host, settings.port)
    run_app(settings, own_run=False)
