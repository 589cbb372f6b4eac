"""Run the real router app on a real socket, in a thread, for tests.

``RouterServer(settings, sink)`` serves ``abserve.router.create_app`` under uvicorn on a
free 127.0.0.1 port; ``ListSink`` collects records in memory (a test of the router alone);
pass ``sink=None`` to use the real store at ``settings.database_url``.
``dev_settings(urls, tmp_path, **overrides)`` builds settings for arms given as
``{"a": url, "b": url}`` (first one primary, dev mode, store under ``tmp_path``, sampled
requests allowed: the fake upstreams seed sampling safely, unlike vLLM on CPU).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from tests.support.fake_upstream import free_port

from abserve.model.records import Exchange
from abserve.router import RouterSettings, create_app
from abserve.router.admission import SharedCounts
from abserve.router.http_limits import limited_protocol
from abserve.router.recording import ExchangeSink

if TYPE_CHECKING:  # not at run time: the router's benchmarks import this with older revisions
    from abserve.model.token_lists import RoutedExchange


class ListSink:
    """Records in memory, thread-safe enough for tests (append is atomic), each as the whole
    ``Exchange`` (the router's record with its logprob models built: ``RoutedExchange.full``)."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    def put(self, record: RoutedExchange) -> None:  # None: stored at once (acknowledged)
        self.exchanges.append(record.full())

    def wait_for(self, n: int, timeout_s: float = 5.0) -> list[Exchange]:
        """Block until at least ``n`` records arrived; fail the test otherwise."""
        deadline = time.monotonic() + timeout_s
        while len(self.exchanges) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {n} records, got {len(self.exchanges)}")
            time.sleep(0.01)
        return self.exchanges


def dev_settings(urls: dict[str, str], tmp_path: Path, **overrides: Any) -> RouterSettings:
    """Settings for local tests: dev mode, first arm primary, SQLite under ``tmp_path``."""
    config: dict[str, Any] = {
        "arms": {
            name: {"url": url, "role": "candidate" if i else "baseline"}
            for i, (name, url) in enumerate(urls.items())
        },
        "primary": next(iter(urls)),
        "dev_mode": True,
        "run_dir": str(tmp_path),
        "run_id": "test-run",
        "seeded_sampling": "allow",
        # the router tests exercise shadow arms (the client answered before the others end)
        "client_waits_for": "primary",
        "acknowledge": "before_store",  # which primary needs (the record needs every arm)
    }
    config.update(overrides)
    return RouterSettings(**config)


class RouterServer:
    """The router app under uvicorn in a background thread."""

    def __init__(self, settings: RouterSettings, sink: ExchangeSink | None = None,
                 shared: SharedCounts | None = None) -> None:
        self.settings = settings
        self.port = free_port()
        self.app = create_app(settings, sink=sink, shared=shared)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="info", access_log=False, backlog=2048,
            http=limited_protocol(settings.max_header_bytes, settings.header_timeout_s),
        )
        self.server = uvicorn.Server(config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    def task_names(self) -> list[str]:
        """Names of the tasks alive in the router's event loop (to find leaks)."""

        async def names() -> list[str]:
            return sorted(t.get_name() for t in asyncio.all_tasks())

        return asyncio.run_coroutine_threadsafe(names(), self.loop).result(timeout=5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RouterServer:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("router did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
