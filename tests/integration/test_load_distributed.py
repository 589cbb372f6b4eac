"""Distributed Locust: one master and worker processes on this machine send one corpus to a
real local server. The totals add up and no request is sent twice; and when a worker process
is killed mid-run, the master ends the run at once with exit code 4 and stop reason
``worker_lost`` instead of waiting for ``--run-time``; and a run that ``--run-time`` cuts short
records ``stopped``, not nothing; and when the process that started Locust (``abserve run``)
is killed, Locust ends the run by itself as ``parent_gone``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
from tests.support.fake_upstream import Knobs, free_port
from tests.support.tokenizing_upstream import TokenizingUpstream

from abserve.traffic.corpus import build_corpus
from abserve.traffic.profiles import load_profile
from abserve.traffic.runner import EXIT_CODES, LOCUSTFILE, LoadSpec, locust_args
from abserve.traffic.timing import read_timings

N = 10
# locust_user.EXIT_WORKER_LOST; not imported: importing Locust would gevent-patch this process
EXIT_WORKER_LOST = 4
# A parent that starts Locust as abserve.traffic.runner does (its pid in ABSERVE_PARENT_PID)
# and waits; the test SIGKILLs it.
PARENT = ("import os, subprocess, sys; os.environ['ABSERVE_PARENT_PID'] = str(os.getpid()); "
          "subprocess.Popen(sys.argv[1:]).wait()")


def _start(tmp_path: Path, url: str, requests: int, workers: int, users: int,
           run_time_s: int) -> tuple[subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
    """A headless master and ``workers`` worker processes on 127.0.0.1."""
    port = free_port()
    args = locust_args(LoadSpec("interleaved", url, requests=requests, duration=None,
                                users=users, seed=5, run_id="dist", out_dir=tmp_path,
                                shape="closed", rate=0.0, max_error_rate=0.2, model=None,
                                tokenize_url=None, overrides=[], timeout_s=30, corpus=None,
                                sweep_rates=None))
    base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    master = subprocess.Popen(
        [*base, "--master", "--headless", "--expect-workers", str(workers), "-u", str(users),
         "-r", str(users), "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--run-time", f"{run_time_s}s", *args],
        stdout=(tmp_path / "master.log").open("w"), stderr=subprocess.STDOUT)
    procs = [subprocess.Popen(
        [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
        stdout=(tmp_path / f"worker{i}.log").open("w"), stderr=subprocess.STDOUT)
        for i in range(workers)]
    return master, procs


def _kill_all(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _nodes(tmp_path: Path) -> dict[str, dict[str, Any]]:
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("node-*.json")]
    return {s["node"]: s for s in summaries}


@pytest.mark.timeout(120)
def test_master_and_two_workers_send_each_request_exactly_once(tmp_path: Path) -> None:
    with TokenizingUpstream(Knobs(n_tokens=3)) as up:
        master, workers = _start(tmp_path, up.url, N, workers=2, users=4, run_time_s=90)
        try:
            assert master.wait(timeout=100) == 0, (tmp_path / "master.log").read_text()[-2000:]
            for w in workers:
                w.wait(timeout=30)
        finally:
            _kill_all(master, *workers)
        arrived = sorted(int(h["x-abserve-corpus-index"]) for h, _ in up.arrivals)
        bodies = {int(h["x-abserve-corpus-index"]): b for h, b in up.arrivals}
    assert arrived == list(range(N)), "each corpus index exactly once"
    parts = sorted(tmp_path.glob("timings-worker*.jsonl"))
    assert len(parts) == 2
    records = read_timings(parts)
    per_worker = {r.worker for r in records}
    assert per_worker == {"worker0", "worker1"}
    assert sorted(r.corpus_index for r in records) == list(range(N))
    nodes = _nodes(tmp_path)
    assert nodes["master"]["stop_reason"] == "completed"
    assert nodes["worker0"]["sent"] + nodes["worker1"]["sent"] == N
    # what the workers sent is byte for byte the corpus one process builds for the same seed
    expected = build_corpus(load_profile("interleaved"), 5, N, "fake-model")
    assert all(orjson.loads(e.body) == bodies[e.index] for e in expected)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("workers", [2, 1])
def test_a_killed_worker_ends_the_run_as_worker_lost(tmp_path: Path, workers: int) -> None:
    # 60 requests of ~0.4 s each over 2 users per worker: several seconds of load, so the kill
    # lands mid-run; --run-time is far away, so only the lost-worker check can end it early
    requests, run_time_s = 60, 600
    with TokenizingUpstream(Knobs(n_tokens=4, token_delay_s=0.1)) as up:
        master, procs = _start(tmp_path, up.url, requests, workers, users=2 * workers,
                               run_time_s=run_time_s)
        try:
            deadline = time.monotonic() + 60
            while len(up.arrivals) < 3 and master.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(up.arrivals) >= 3, (tmp_path / "master.log").read_text()[-2000:]
            procs[0].kill()  # SIGKILL: no goodbye to the master, no summary of its own
            killed_at = time.monotonic()
            code = master.wait(timeout=30)
            took = time.monotonic() - killed_at
            for w in procs[1:]:
                w.wait(timeout=30)
        finally:
            _kill_all(master, *procs)
        sent = len(up.arrivals)
    log = (tmp_path / "master.log").read_text()
    assert code == EXIT_WORKER_LOST, log[-2000:]
    assert EXIT_CODES[code] == "a worker was lost"
    assert sent < requests, "the run ended before the killed worker's shard could be sent"
    assert took < 20, f"the master took {took:.1f} s to notice the lost worker"
    nodes = _nodes(tmp_path)
    assert nodes["master"]["stop_reason"] == "worker_lost"
    assert nodes["master"]["done_shards"] == []
    # the killed worker wrote no summary; a survivor did, and it is not the shard named lost
    survivors = [name for name in nodes if name != "master"]
    assert len(survivors) == workers - 1
    lost_line = next(line for line in log.splitlines() if "abserve: lost worker" in line)
    assert all(f"(shard {name.removeprefix('worker')})" not in lost_line for name in survivors)
    print(f"master exit {code} {took:.1f} s after the kill; {sent} of {requests} sent")


@pytest.mark.timeout(90)
def test_a_run_time_stop_before_the_shards_are_done_is_not_completed(tmp_path: Path) -> None:
    # ~12 s of load against a 4 s --run-time: Locust ends the run, not abserve
    with TokenizingUpstream(Knobs(n_tokens=4, token_delay_s=0.1)) as up:
        master, procs = _start(tmp_path, up.url, 60, workers=1, users=2, run_time_s=4)
        try:
            code = master.wait(timeout=60)
            procs[0].wait(timeout=30)
        finally:
            _kill_all(master, *procs)
        sent = len(up.arrivals)
    assert 0 < sent < 60
    assert code != EXIT_WORKER_LOST, (tmp_path / "master.log").read_text()[-2000:]
    master_summary = _nodes(tmp_path)["master"]
    assert master_summary["stop_reason"] == "stopped"
    assert master_summary["done_shards"] == []


@pytest.mark.timeout(90)
def test_a_killed_parent_ends_the_load_as_parent_gone(tmp_path: Path) -> None:
    requests = 60  # ~0.4 s each over 2 users: far more load than runs before the kill
    with TokenizingUpstream(Knobs(n_tokens=4, token_delay_s=0.1)) as up:
        args = locust_args(LoadSpec("interleaved", up.url, requests=requests, users=2, seed=5,
                                    run_id="orphan", out_dir=tmp_path, timeout_s=30))
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2",
               "-r", "2", "--run-time", "600s", *args]
        with (tmp_path / "locust.log").open("w") as log:
            parent = subprocess.Popen([sys.executable, "-c", PARENT, *cmd], stdout=log,
                                      stderr=subprocess.STDOUT)
        locust: list[psutil.Process] = []
        try:
            deadline = time.monotonic() + 60
            while len(up.arrivals) < 3 and parent.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(up.arrivals) >= 3, (tmp_path / "locust.log").read_text()[-2000:]
            locust = psutil.Process(parent.pid).children(recursive=True)
            parent.kill()
            parent.wait(timeout=10)
            _, alive = psutil.wait_procs(locust, timeout=20)
            assert alive == [], (tmp_path / "locust.log").read_text()[-2000:]
        finally:
            for proc in locust:
                if proc.is_running():
                    proc.kill()
        sent = len(up.arrivals)
    assert sent < requests
    assert _nodes(tmp_path)["local"]["stop_reason"] == "parent_gone"
