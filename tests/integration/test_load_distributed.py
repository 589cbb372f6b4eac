"""Distributed Locust: one master and two worker processes on this machine send one corpus
to a real local server; the totals add up and no request is sent twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from tests.support.fake_upstream import Knobs, free_port
from tests.support.tokenizing_upstream import TokenizingUpstream

from abserve.traffic.corpus import build_corpus
from abserve.traffic.profiles import load_profile
from abserve.traffic.runner import LOCUSTFILE, LoadSpec, locust_args
from abserve.traffic.timing import read_timings

N = 10


@pytest.mark.timeout(120)
def test_master_and_two_workers_send_each_request_exactly_once(tmp_path: Path) -> None:
    port = free_port()
    with TokenizingUpstream(Knobs(n_tokens=3)) as up:
        args = locust_args(LoadSpec("interleaved", up.url, requests=N, duration=None, users=4, seed=5,
                           run_id="dist", out_dir=tmp_path, shape="closed", rate=0.0,
                           max_error_rate=0.2, model=None, tokenize_url=None, overrides=[],
                           timeout_s=30, corpus=None, sweep_rates=None))
        base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
        master = subprocess.Popen(
            [*base, "--master", "--headless", "--expect-workers", "2", "-u", "4", "-r", "4",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
             "--run-time", "90s", *args],
            stdout=(tmp_path / "master.log").open("w"), stderr=subprocess.STDOUT)
        workers = [subprocess.Popen(
            [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            stdout=(tmp_path / f"worker{i}.log").open("w"), stderr=subprocess.STDOUT)
            for i in range(2)]
        try:
            assert master.wait(timeout=100) == 0, (tmp_path / "master.log").read_text()[-2000:]
            for w in workers:
                w.wait(timeout=30)
        finally:
            for proc in (master, *workers):
                if proc.poll() is None:
                    proc.kill()
        arrived = sorted(int(h["x-abserve-corpus-index"]) for h, _ in up.arrivals)
        bodies = {int(h["x-abserve-corpus-index"]): b for h, b in up.arrivals}
    assert arrived == list(range(N)), "each corpus index exactly once"
    parts = sorted(tmp_path.glob("timings-worker*.jsonl"))
    assert len(parts) == 2
    records = read_timings(parts)
    per_worker = {r.worker for r in records}
    assert per_worker == {"worker0", "worker1"}
    assert sorted(r.corpus_index for r in records) == list(range(N))
    nodes = {json.loads(p.read_text())["node"]: json.loads(p.read_text())
             for p in tmp_path.glob("node-*.json")}
    assert nodes["master"]["stop_reason"] == "completed"
    assert nodes["worker0"]["sent"] + nodes["worker1"]["sent"] == N
    # what the workers sent is byte for byte the corpus one process builds for the same seed
    expected = build_corpus(load_profile("interleaved"), 5, N, "fake-model")
    assert all(orjson.loads(e.body) == bodies[e.index] for e in expected)
