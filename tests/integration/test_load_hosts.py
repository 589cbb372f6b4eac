"""Load from several hosts (``abserve.traffic.remote``), across real network boundaries:
namespaced hosts (``tests.support.netns``) for the orchestrator (``abserve load``'s Locust
master), two load hosts (``abserve load-worker``) and the arm. The workers send one corpus
between them, each request once, their timings shipped back to the master (nothing written
on the master's paths by another host); a load host killed mid-run ends the load with exit 7;
a load host that never connects is refused within the stated wait, exit 4."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.support.netns import private_net
from tests.support.scale_out import load_command, start_fake_arm, start_load_worker, tail

from abserve.base import exit_codes
from abserve.traffic.corpus import build_corpus
from abserve.traffic.profiles import load_profile
from abserve.traffic.timing import read_timings

N = 24


@pytest.mark.timeout(180)
def test_two_load_hosts_send_one_corpus_for_the_master(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with private_net("orch", "load1", "load2", "arms") as hosts:
        arm = start_fake_arm(hosts["arms"], tmp_path)
        for name in ("load1", "load2"):
            start_load_worker(hosts[name], hosts["orch"], tmp_path, runs=1)
        done = hosts["orch"].run(load_command(hosts["orch"], [arm], out, N, workers=2, users=4),
                                 timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr + tail(out / "locust.log")
    records = read_timings([out / "timings.jsonl"])
    assert sorted(r.corpus_index for r in records) == list(range(N)), "each request once"
    assert {r.worker for r in records} == {"worker0", "worker1"}
    assert all(r.ok for r in records)
    shipped = [json.loads(p.read_text()) for p in out.glob("node-worker*-remote.json")]
    assert sorted(s["node"] for s in shipped) == ["worker0", "worker1"]
    assert sum(s["sent"] for s in shipped) == N
    # the same requests one process builds for the seed: the traffic is the master's
    expected = {e.index: e.body for e in build_corpus(load_profile("interleaved"), 5, N, "fake-model")}
    assert {r.corpus_index: r.request_bytes for r in records} == {
        i: len(body) for i, body in expected.items()}


@pytest.mark.timeout(180)
def test_a_killed_load_host_ends_the_load_with_exit_7(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with private_net("orch", "load1", "load2", "arms") as hosts:
        arm = start_fake_arm(hosts["arms"], tmp_path, tokens=4, delay_s=0.1)
        for name in ("load1", "load2"):
            start_load_worker(hosts[name], hosts["orch"], tmp_path, runs=1)
        load = hosts["orch"].popen(load_command(hosts["orch"], [arm], out, 200, workers=2, users=4),
                                   log=tmp_path / "load.log")
        deadline = time.monotonic() + 90
        while "built" not in tail(tmp_path / "load-worker-load2.log"):
            assert time.monotonic() < deadline, tail(tmp_path / "load.log")
            assert load.poll() is None, tail(tmp_path / "load.log")
            time.sleep(0.2)
        time.sleep(2.0)  # the load is under way
        hosts["load2"].kill()
        killed_at = time.monotonic()
        code = load.wait(timeout=60)
        took = time.monotonic() - killed_at
    log = tail(tmp_path / "load.log") + tail(out / "locust.log")
    assert code == exit_codes.LOAD_WORKER_LOST, log
    assert "lost worker" in log
    print(f"abserve load exited {code} {took:.1f} s after the load host was killed")


@pytest.mark.timeout(120)
def test_a_load_host_that_never_connects_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with private_net("orch", "load1", "arms") as hosts:
        arm = start_fake_arm(hosts["arms"], tmp_path)
        start_load_worker(hosts["load1"], hosts["orch"], tmp_path, runs=1)
        began = time.monotonic()
        done = hosts["orch"].run(load_command(hosts["orch"], [arm], out, N, workers=2, users=4,
                                              wait_s=8), timeout=100)
        took = time.monotonic() - began
    assert done.returncode == exit_codes.USAGE, done.stdout + done.stderr
    assert "load refused: 1 of 2 load workers connected within 8 s" in done.stderr
    assert not (out / "timings.jsonl").exists() or not (out / "timings.jsonl").read_text()
    print(f"refused after {took:.1f} s")
