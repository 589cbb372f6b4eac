"""``abserve router --workers 2`` for real: two router processes, one port, one PostgreSQL run.

The router runs as a subprocess (supervisor + 2 workers) against two fake upstreams and a
real PostgreSQL server (the session's throwaway server, ``pg_url``). Every streamed request gets a
fresh connection, so the kernel spreads them over both workers. Checked: every exchange
acknowledged to the client (its ``x-abserve-request-id``) is stored exactly once, both
workers answered some, ``/metrics`` counts the requests of all workers whichever answers,
the run is created once and ``completed`` after SIGTERM; with ``resume`` a restarted
supervisor reopens the run and both halves are stored once; with its parent (``abserve
run``) killed, supervisor and workers stop by themselves and the run is stored
``interrupted``. Settings several workers cannot share (SQLite) are refused with a usage
error; a port already taken stops the supervisor before it touches the store.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from sqlalchemy import select
from tests.support.fake_upstream import FakeUpstream, free_port

from abserve.model.records import REQUEST_ID_HEADER
from abserve.store import Store
from abserve.store.schema import runs_table

pytestmark = [pytest.mark.timeout(180), pytest.mark.postgres]
REQUESTS = 60
BODY = {"model": "fake-model", "stream": True, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "count me once"}]}


def _config(tmp_path: Path, urls: list[str], database_url: str | None,
            resume: bool = False) -> tuple[Path, int]:
    port = free_port()
    config = {"arms": {"a": {"url": urls[0]}, "b": {"url": urls[1]}}, "primary": "a",
              "dev_mode": True, "run_dir": str(tmp_path / "run"), "run_id": "workers-run",
              "port": port, "max_concurrency": 64, "resume": resume}
    if database_url:
        config["database_url"] = database_url
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, port


def _wait_up(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, "router exited during startup"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("router did not come up")


def _one(port: int) -> str:
    headers = {"connection": "close"}  # a fresh connection each time: both workers get some
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=BODY,
                      headers=headers, timeout=30) as resp:
        assert resp.status_code == 200
        text = b"".join(resp.iter_raw())
    assert text.endswith(b"data: [DONE]\n\n")
    return resp.headers[REQUEST_ID_HEADER]


def _arm_requests(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.search(r'^abserve_router_arm_requests_total\{arm="a"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_two_workers_store_every_acknowledged_exchange_once(tmp_path: Path, pg_url: str) -> None:
    with FakeUpstream() as a, FakeUpstream() as b:
        config, port = _config(tmp_path, [a.url, b.url], pg_url)
        log = tmp_path / "router.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "abserve", "router", "--config",
                                     str(config), "--workers", "2"], stdout=out, stderr=out)
        try:
            _wait_up(proc, port)
            assert len(psutil.Process(proc.pid).children()) == 2
            with ThreadPoolExecutor(6) as pool:
                acked = list(pool.map(lambda _: _one(port), range(REQUESTS)))
            deadline = time.monotonic() + 10  # shadows may still be recording
            while _arm_requests(port) < REQUESTS and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _arm_requests(port) == REQUESTS  # summed over workers
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=90)
    assert proc.returncode == 0, log.read_text()[-3000:]
    per_worker = [len(re.findall(rf"\[w{i}\] exchange \w+ recorded", log.read_text()))
                  for i in range(2)]
    assert sum(per_worker) == REQUESTS, per_worker
    assert min(per_worker) > 0, per_worker
    with Store.open(pg_url) as store:
        run = store.get_run("workers-run")
        assert run is not None
        assert run.status == "completed"
        assert len(store.list_runs()) == 1
        stored = [e.request_id for e in store.iter_exchanges("workers-run")]
    assert len(set(acked)) == REQUESTS
    assert sorted(stored) == sorted(acked)  # each acknowledged exchange, exactly once


def _serve(config: Path, port: int, log: Path, requests: int) -> list[str]:
    """``abserve router --workers 2`` until ``requests`` were answered, then SIGTERM."""
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "abserve", "router", "--config",
                                 str(config), "--workers", "2"], stdout=out, stderr=out)
    try:
        _wait_up(proc, port)
        with ThreadPoolExecutor(4) as pool:
            acked = list(pool.map(lambda _: _one(port), range(requests)))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=90)
    assert proc.returncode == 0, log.read_text()[-3000:]
    return acked


def test_a_restarted_supervisor_resumes_its_run_across_workers(tmp_path: Path, pg_url: str) -> None:
    with FakeUpstream() as a, FakeUpstream() as b:
        config, port = _config(tmp_path, [a.url, b.url], pg_url, resume=True)
        log = tmp_path / "router.log"
        acked = _serve(config, port, log, 12) + _serve(config, port, log, 12)
    assert "resumed after a router restart" in log.read_text()
    with Store.open(pg_url) as store:
        run = store.get_run("workers-run")
        stored = [e.request_id for e in store.iter_exchanges("workers-run")]
    assert run is not None
    assert run.status == "completed"
    assert len(run.provenance.router_restarts) == 1
    assert sorted(stored) == sorted(acked)  # both halves, each acknowledged exchange once


def test_several_workers_refuse_sqlite(tmp_path: Path) -> None:
    config, _ = _config(tmp_path, ["http://127.0.0.1:9", "http://127.0.0.1:9"], None)
    done = subprocess.run([sys.executable, "-m", "abserve", "router", "--config", str(config),
                           "--workers", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 4
    assert "PostgreSQL" in done.stderr


def test_a_taken_port_is_a_startup_error_before_the_store_is_touched(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config, _ = _config(tmp_path, ["http://127.0.0.1:9", "http://127.0.0.1:9"],
                            f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none")
        done = subprocess.run([sys.executable, "-m", "abserve", "router", "--config", str(config),
                               "--port", str(taken.getsockname()[1]), "--workers", "2"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 4, done.stderr[-2000:]
    assert "cannot listen on 127.0.0.1" in done.stderr


# A parent that starts the router as abserve run does (its pid in the router's settings, here
# through the environment: ABSERVE_ROUTER_PARENT_PID) and waits; the test SIGKILLs it.
PARENT = ("import os, subprocess, sys; os.environ['ABSERVE_ROUTER_PARENT_PID'] = str(os.getpid()); "
          "subprocess.Popen([sys.executable, '-m', 'abserve', 'router', '--config', sys.argv[1], "
          "'--workers', '2'], stdout=sys.stdout, stderr=sys.stderr).wait()")


def test_a_supervisor_whose_parent_is_killed_stops_and_marks_its_run_interrupted(
        tmp_path: Path, pg_url: str) -> None:
    """Supervisor and workers gone within 20 s of the SIGKILL; the stored status (not only the
    status derived from a dead owner) is ``interrupted``; what was acknowledged is stored."""
    with FakeUpstream() as a, FakeUpstream() as b:
        config, port = _config(tmp_path, [a.url, b.url], pg_url)
        log = tmp_path / "router.log"
        with open(log, "wb") as out:
            parent = subprocess.Popen([sys.executable, "-c", PARENT, str(config)], stdout=out,
                                      stderr=out)
        started: list[psutil.Process] = []
        try:
            _wait_up(parent, port)
            started = psutil.Process(parent.pid).children(recursive=True)
            assert len(started) == 3, started  # the supervisor and its 2 workers
            acked = [_one(port) for _ in range(6)]
            parent.send_signal(signal.SIGKILL)
            parent.wait(timeout=10)
            _, alive = psutil.wait_procs(started, timeout=20)
            assert alive == [], log.read_text()[-3000:]
        finally:
            for proc in started:
                if proc.is_running():
                    proc.kill()
    assert "is gone (abserve run was killed)" in log.read_text()
    with Store.open(pg_url) as store, store.engine.connect() as conn:
        status = conn.execute(select(runs_table.c.status).where(
            runs_table.c.run_id == "workers-run")).scalar_one()
        stored = [e.request_id for e in store.iter_exchanges("workers-run")]
    assert status == "interrupted"
    assert sorted(stored) == sorted(acked)
