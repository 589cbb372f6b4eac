"""``abserve router --workers N``: N router processes behind one port, one run, one store.

One router process is one event loop: it uses one core. On a GPU host the router's CPU per
1 MB request caps what one process can forward (``benchmarks/router_overhead.md``), so the
router scales out to N worker processes. The supervisor (this module, in the ``abserve
router`` process):

1. creates the run once in the store, as its owner (``Store.create_run``; with ``resume``
   a restarted supervisor reopens it: ``router.run_open``); workers write
   into it and heartbeat without claiming it, so a reader sees the run ``running`` while
   the supervisor lives and ``interrupted`` if it dies;
2. holds the port (bound, not listening) while every worker listens on it with its own
   ``SO_REUSEPORT`` socket: the kernel spreads new connections evenly over the workers
   (one shared socket would not: uvloop accepts every pending connection at once, so a
   burst of keep-alive connections could all land on one worker);
3. starts the workers (``python -m abserve.router.workers``) with the same settings file,
   the same run id and its own index, and restarts one that dies;
4. on SIGINT/SIGTERM stops every worker with SIGTERM (each drains its exchanges and flushes
   its records, as a single router does), then marks the run ``completed``; it does the
   same, but marks the run ``interrupted``, when its parent (``parent_pid``: ``abserve
   run``) is gone, and each worker stops itself if the supervisor is (``abserve.base.parent_watch``).

Several processes writing one run need PostgreSQL (``database_url``); SQLite stays the
single-process default and is refused here. What is per process, and how it is made right
across workers:

- records: each worker inserts only the exchanges it answered (request ids are random
  UUIDs), so every acknowledged exchange is stored exactly once;
- metrics: prometheus-client's multiprocess mode in a directory the supervisor creates and
  removes; any worker's ``/metrics`` reports the sum over all workers;
- admission: every worker admits against the counts of all workers
  (``router.admission``: a file of per-worker counts the supervisor creates beside the
  metrics, mapped by every worker, checked and taken under a lock), so ``max_concurrency``
  and ``max_shadow_backlog`` hold for the router as a whole and no worker refuses a client
  while another has room.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from abserve.base import module_cli
from abserve.base.parent_watch import parent_gone
from abserve.router.admission import SharedCounts, create_counts
from abserve.router.metrics import MULTIPROC_ENV
from abserve.router.serve import StartupError, run_app
from abserve.router.settings import RouterSettings, load_settings

log = logging.getLogger("abserve.router")
PARENT_PID_SETTING = "ABSERVE_ROUTER_PARENT_PID"  # RouterSettings.parent_pid from the environment
RESTART_PAUSE_S = 1.0  # between a worker's death and its replacement
STARTUP_GRACE_S = 20.0  # a worker that dies sooner after its start is not restarted


def check_multi(settings: RouterSettings, workers: int) -> None:
    """Refuse settings several workers cannot share (ValueError, shown as a usage error)."""
    if workers < 1:
        raise ValueError("--workers must be at least 1")
    if workers > 1 and not (settings.database_url or "").startswith("postgresql"):
        raise ValueError("several router workers need a PostgreSQL database_url "
                         "(SQLite serves one router process)")


def bind_port(host: str, port: int, listen: bool) -> socket.socket:
    """A ``SO_REUSEPORT`` socket on ``host:port``: the supervisor's (not listening: holds the
    port, receives nothing) or a worker's (listening)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


class Supervisor:
    """Starts, watches and stops the workers of one run."""

    def __init__(self, config: Path, settings: RouterSettings, workers: int,
                 overrides: dict[str, Any]) -> None:
        self.config, self.settings, self.workers = config, settings, workers
        self.overrides = {**overrides, "run_id": settings.run_id}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.counts = Path()  # the workers' shared admission counts (created in ``run``)
        self.started = [0.0] * workers  # monotonic start time of each worker
        self.stopping = False
        self.orphaned = False  # stopped because its parent (settings.parent_pid) is gone
        self._restarted = 0

    def _spawn(self, index: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
        self.started[index] = time.monotonic()
        args = [sys.executable, "-m", "abserve.router.workers", "--config", str(self.config),
                "--index", str(index), "--admission", str(self.counts),
                "--overrides", json.dumps(self.overrides)]
        return subprocess.Popen(args, env=env)

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        """Serve until SIGINT/SIGTERM; returns the number of worker restarts. Raises
        ``StartupError`` when the port cannot be held or a worker dies while starting (the
        run, if created, is then ``interrupted``)."""
        from abserve.router.run_open import open_run
        from abserve.store import Store, StoreError

        s = self.settings
        try:
            held = bind_port(s.host, s.port, listen=False)
        except OSError as exc:
            raise StartupError(f"cannot listen on {s.host}:{s.port}: {exc.strerror}") from exc
        self.overrides["port"] = held.getsockname()[1]  # port 0: the one the kernel chose
        with Store.open(s.effective_database_url) as store:
            try:
                open_run(store, s.run_id, {**s.public_config(), "workers": self.workers}, s.resume,
                         s.run_provenance)
            except StoreError as exc:  # exists (no resume), still written, or another config
                held.close()
                raise StartupError(str(exc)) from exc
            metrics_dir = tempfile.mkdtemp(prefix="abserve-router-metrics-")
            # workers watch the supervisor, not abserve run (abserve.base.parent_watch); in their
            # environment, as the environment wins over a settings file and overrides
            env = {**os.environ, MULTIPROC_ENV: metrics_dir, PARENT_PID_SETTING: str(os.getpid())}
            self.counts = Path(metrics_dir) / "admission.bin"  # not a *.db: metrics' own files
            create_counts(self.counts, self.workers)
            restarts, failed = 0, None
            old = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                self.procs = [self._spawn(i, env) for i in range(self.workers)]
                log.info("router supervisor: run %s, %d workers on %s:%d", s.run_id,
                         self.workers, s.host, s.port)
                while not self.stopping:
                    time.sleep(0.2)
                    self._check_parent()
                    failed = self._replace_dead(env)
                    restarts += self._restarted
                    self.stopping = self.stopping or failed is not None
            finally:
                self._shutdown()
                held.close()
                for sig, handler in old.items():
                    signal.signal(sig, handler)
                cut_short = failed is not None or self.orphaned
                store.finish_run(s.run_id, "interrupted" if cut_short else "completed")
                shutil.rmtree(metrics_dir, ignore_errors=True)
        if failed is not None:
            raise StartupError(failed)
        return restarts

    def _check_parent(self) -> None:
        """Stop (the run to be marked interrupted) once ``settings.parent_pid`` is gone."""
        pid = self.settings.parent_pid
        if pid is not None and not self.orphaned and parent_gone(pid):
            log.warning("parent process %d is gone (abserve run was killed): stopping", pid)
            self.orphaned = self.stopping = True

    def _replace_dead(self, env: dict[str, str]) -> str | None:
        """Restart workers that died after starting; the reason to stop when one died
        within ``STARTUP_GRACE_S`` of its start (a restart would fail the same way)."""
        self._restarted = 0
        for i, proc in enumerate(self.procs):
            if proc.poll() is None or self.stopping:
                continue
            if time.monotonic() - self.started[i] < STARTUP_GRACE_S:
                return f"router worker {i} exited with {proc.returncode} while starting"
            log.error("router worker %d (pid %d) exited with %s; restarting", i, proc.pid,
                      proc.returncode)
            time.sleep(RESTART_PAUSE_S)
            self.procs[i] = self._spawn(i, env)
            self._restarted += 1
        return None

    def _shutdown(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.drain_timeout_s + 15
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("router worker pid %d did not stop; killing it", proc.pid)
                proc.kill()
                proc.wait()


def serve_workers(config: Path, overrides: dict[str, Any], workers: int) -> None:
    """Serve the router as ``workers`` processes (see the module docstring)."""
    settings = load_settings(config, **overrides)
    check_multi(settings, workers)
    Supervisor(config, settings, workers, overrides).run()


worker_app = module_cli.app_of()


@worker_app.command()
def _worker(config: Annotated[Path, typer.Option()], index: Annotated[int, typer.Option()],
            admission: Annotated[Path, typer.Option()],
            overrides: Annotated[str, typer.Option()] = "{}") -> None:
    """One worker: the router app on the supervisor's socket, writing into its run."""
    settings = load_settings(config, **json.loads(overrides))
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s %(name)s[w{index}] %(message)s")
    shared = SharedCounts(admission, index)  # zeroes a dead predecessor's counts
    run_app(settings, bind_port(settings.host, settings.port, listen=True), own_run=False,
            shared=shared)


if __name__ == "__main__":
    raise SystemExit(module_cli.run(worker_app, None, "abserve.router.workers"))
