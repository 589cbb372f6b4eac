"""``abserve router --join``: one more router replica of a run, on any host.

One router process uses one core, and ``--workers N`` spreads a run over the cores of one
host. Beyond one host, router replicas on several hosts serve one run in one PostgreSQL store:
the first (``abserve router`` as usual) creates and owns the run; each other replica joins it
(``abserve router --join`` with the same settings file, its own ``host``/``port``). A joined
replica waits (``JOIN_WAIT_S``) for the run to exist and be running, refuses one recorded with
other arms or another primary, and then serves exactly as a router worker does (``own_run``
False: it writes the exchanges it answered, heartbeats without claiming the run, never
creates or finishes it). The load spreads over the replicas (``abserve load --also-host``).

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


def serve_replica(config: Path, overrides: dict[str, Any], wait_s: float = JOIN_WAIT_S) -> None:
    """Serve as one more replica of the run the settings name (see the module docstring)."""
    settings = load_settings(config, **overrides)
    check_joinable(settings)
    wait_for_run(settings, wait_s)
    log.info("router replica: joining run %s on %s:%d", settings.run_id, settings.host, settings.port)
    run_app(settings, own_run=False)
