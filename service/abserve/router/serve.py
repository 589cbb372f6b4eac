"""Serve one router process under uvicorn: what ``abserve router`` and each of its workers run.

Both the command (``abserve.cli.router``: one process) and the supervisor's workers
(``router/workers.py``: N processes behind one port) serve through ``run_app``; it lives here,
below both, so neither imports the other for it.

Served with uvloop and httptools (the cheapest event loop and HTTP parser uvicorn has).
Before serving, everything alive after startup is frozen out of the garbage collector's sight
(``gc.freeze``): the router's records keep ~600 container objects alive per exchange
until they are written, which triggers full collections, and each one walked the whole
startup heap (FastAPI, pydantic, SQLAlchemy): measured under load, a full
collection took up to 64 ms of CPU with the event loop stopped, 5 ms once frozen, and the
router's CPU per request fell by ~1 ms (``benchmarks/router_overhead.md``). The GIL's
switch interval is shortened so that the store's writer thread cannot keep the event loop
waiting for long (``GIL_SWITCH_INTERVAL_S``).
"""

from __future__ import annotations

import gc
import socket
import sys
from typing import TYPE_CHECKING

from abserve.base import exit_codes

if TYPE_CHECKING:
    from abserve.router.admission import SharedCounts
    from abserve.router.settings import RouterSettings

# The store's writer thread and the event loop share the GIL. With CPython's default 5 ms
# switch interval a loop waiting for it while the writer inserts a batch waits up to 5 ms
# per hand-over: the router's 1-stream p99 latency came in bursts at the flush interval.
# 0.5 ms bounds that wait; measured: TTFT p99 18-19 -> 14 ms, CPU per request unchanged
# (benchmarks/router_overhead.md).
GIL_SWITCH_INTERVAL_S = 0.0005


class StartupError(RuntimeError):
    """The router could not start: the port is taken, or a worker died while starting."""


def run_app(settings: RouterSettings, sock: socket.socket | None = None,
            own_run: bool = True, shared: SharedCounts | None = None) -> None:
    """Serve one router process: on ``settings.host``/``port``, or on a listening socket of
    its own (a worker of several, which does not own its run and admits against the counts
    of all workers, ``shared``: ``router/workers.py``)."""
    import uvicorn

    from abserve.router import create_app
    from abserve.router.http_limits import limited_protocol

    app = create_app(settings, own_run=own_run, shared=shared)
    freeze_heap()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # httptools with a bounded request head (size, time): router/http_limits.py
        http=limited_protocol(settings.max_header_bytes, settings.header_timeout_s),
        access_log=False,  # our own log line per exchange; no headers, no bodies
        proxy_headers=False,  # X-Forwarded-* are not trusted, and the middleware costs CPU
        timeout_graceful_shutdown=int(settings.drain_timeout_s) + 5,
        backlog=2048,
        log_level="info",
    )
    server = uvicorn.Server(config)
    server.run(sockets=None if sock is None else [sock])
    if not server.started:
        sys.exit(exit_codes.USAGE)  # it could not start (port taken, app failed): a tool error


def freeze_heap() -> None:
    """Collect once, then exclude every object alive now from later collections."""
    import abserve.store  # noqa: F401  (the app imports it at startup; freeze it too)

    gc.collect()
    gc.freeze()
