"""Acknowledged means stored: SIGKILL the router under load and count what survived.

The router runs as a real process (``abserve router``, its default ``acknowledge: stored``)
in front of two fake upstreams streaming 8 tokens 5 ms apart; client threads send streamed
and non-streamed requests over real HTTP until the router dies. It is killed with SIGKILL
(every process of it: the supervisor and, on PostgreSQL, its workers) at a random moment
once some answers were received in full, several times, each time under a new run in the
same store. Checked each time: every request whose answer the client received in full (a
stream ending in ``[DONE]``, or a whole JSON body with its choices) is in the store exactly
once, no exchange is stored twice, and the run reads back as ``interrupted``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from tests.support.fake_upstream import FakeUpstream, Knobs, free_port

from abserve.model.records import REQUEST_ID_HEADER
from abserve.store import Store

pytestmark = pytest.mark.timeout(120)
CLIENTS = 8


def _body(i: int, stream: bool) -> dict[str, object]:
    return {"model": "fake-model", "stream": stream, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": f"crash {i}"}]}


def _one(client: httpx.Client, url: str, i: int) -> str | None:
    """The request's id when its answer was received in full, else None."""
    stream = i % 2 == 0
    with client.stream("POST", url, json=_body(i, stream), timeout=30) as resp:
        raw = b"".join(resp.iter_raw())
    if resp.status_code != 200:
        return None
    whole = raw.endswith(b"data: [DONE]\n\n") if stream else b'"choices"' in raw and raw.endswith(b"}")
    return resp.headers[REQUEST_ID_HEADER] if whole else None


class Load:
    """Client threads sending requests until the router stops answering."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        self.acked: list[str] = []
        self._lock, self._next = threading.Lock(), 0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]

    def _run(self) -> None:
        with httpx.Client() as client:
            while True:
                with self._lock:
                    i, self._next = self._next, self._next + 1
                try:
                    got = _one(client, self.url, i)
                except httpx.HTTPError:
                    return  # the router is gone
                if got is not None:
                    with self._lock:
                        self.acked.append(got)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        for thread in self._threads:
            thread.join(timeout=30)


def _config(tmp_path: Path, urls: list[str], run_id: str, database_url: str | None) -> tuple[Path, int]:
    port = free_port()
    config = {"arms": {"a": {"url": urls[0]}, "b": {"url": urls[1]}}, "primary": "a",
              "dev_mode": True, "run_dir": str(tmp_path / "run"), "run_id": run_id, "port": port,
              "max_concurrency": 64}
    if database_url:
        config["database_url"] = database_url
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, port


def _up(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether the router came up; False when it exited first (its port was taken since)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("router did not come up")


def _start(tmp_path: Path, urls: list[str], run_id: str, database_url: str | None,
           workers: int) -> tuple[subprocess.Popen[bytes], int, str]:
    """The router serving a new run (a fresh port and run when a free port was taken)."""
    for attempt in range(3):
        run = f"{run_id}-{attempt}"
        config, port = _config(tmp_path, urls, run, database_url)
        cmd = [sys.executable, "-m", "abserve", "router", "--config", str(config)]
        if workers > 1:
            cmd += ["--workers", str(workers)]
        with open(tmp_path / f"{run}.log", "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        if _up(proc, port):
            return proc, port, run
    raise AssertionError("router did not start in 3 tries")


def _kill_all(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the router and every process it started, by PID (no clean shutdown)."""
    family = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _crash_once(tmp_path: Path, urls: list[str], run_id: str, database_url: str | None,
                workers: int, rng: random.Random) -> tuple[str, list[str]]:
    """Load the router, SIGKILL it at a random moment: its run, the ids answered in full."""
    proc, port, run = _start(tmp_path, urls, run_id, database_url, workers)
    try:
        with Load(port) as load:
            least, deadline = rng.randint(10, 40), time.monotonic() + 30
            while len(load.acked) < least and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.05))  # anywhere in a stream, a commit, a request
            _kill_all(proc)
    finally:
        if proc.poll() is None:
            _kill_all(proc)
    assert proc.returncode == -signal.SIGKILL
    assert len(load.acked) >= least, "too few answers before the kill"
    return run, load.acked


def _check(database_url: str, run_id: str, acked: list[str]) -> None:
    with Store.open(database_url) as store:
        run = store.get_run(run_id)
        assert run is not None
        assert run.status == "interrupted"
        stored = Counter(e.request_id for e in store.iter_exchanges(run_id))
    assert not [rid for rid, n in stored.items() if n > 1], "an exchange stored twice"
    lost = [rid for rid in acked if rid not in stored]
    assert not lost, f"{len(lost)} of {len(acked)} answers received in full are not stored"
    assert len(set(acked)) == len(acked)


def _crash_rounds(tmp_path: Path, database_url: str | None, workers: int, rounds: int) -> None:
    knobs = Knobs(n_tokens=8, token_delay_s=0.005)
    with FakeUpstream(knobs) as a, FakeUpstream(knobs) as b:
        rng = random.Random(52)
        for n in range(rounds):
            run_id, acked = _crash_once(tmp_path, [a.url, b.url], f"crash-{n}", database_url,
                                        workers, rng)
            url = database_url or f"sqlite:///{(tmp_path / 'run' / 'abserve.db').resolve()}"
            _check(url, run_id, acked)


def test_sigkill_loses_no_acknowledged_exchange_sqlite(tmp_path: Path) -> None:
    _crash_rounds(tmp_path, None, workers=1, rounds=3)


@pytest.mark.postgres
def test_sigkill_loses_no_acknowledged_exchange_postgres_workers(tmp_path: Path,
                                                                  pg_url: str) -> None:
    _crash_rounds(tmp_path, pg_url, workers=2, rounds=2)
