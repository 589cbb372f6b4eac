"""``abserve run`` with its load on other hosts (config ``load.workers``), across real network
boundaries (``tests.support.netns``): the orchestrator's host runs ``abserve run`` (its router
and its Locust master listen on the host's address), two load hosts run ``abserve
load-worker``, the arms' host serves two ``url:`` arms (fake vLLM servers). One load host is
killed mid-run: the run stops with exit 7 and an INVALID report saying a worker was lost."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from tests.support.netns import Host, private_net
from tests.support.scale_out import (
    ABSERVE,
    MASTER_PORT,
    experiment,
    start_fake_arm,
    start_load_worker,
    tail,
)

from abserve.base import exit_codes

REPO = Path(__file__).resolve().parents[2]


def _load(orch: Host, requests: int) -> dict[str, object]:
    return {"users": 4, "profiles": [{"profile": "interleaved", "requests": requests}],
            "workers": {"count": 2, "bind": f"{orch.ip}:{MASTER_PORT}", "connect_timeout_s": 60}}


@pytest.mark.timeout(300)
def test_a_load_host_killed_mid_run_stops_the_run_with_exit_7_and_a_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with private_net("orch", "load1", "load2", "arms") as hosts:
        arms = [start_fake_arm(hosts["arms"], tmp_path, delay_s=0.05),
                start_fake_arm(hosts["arms"], tmp_path, delay_s=0.05, port=8001)]
        for name in ("load1", "load2"):
            start_load_worker(hosts[name], hosts["orch"], tmp_path)
        env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
        config = experiment(tmp_path, arms, _load(hosts["orch"], 400), "load-hosts")
        run = hosts["orch"].popen([*ABSERVE, "run", str(config), "--out", str(out)],
                                  log=tmp_path / "run.log", env=env, cwd=REPO)
        deadline = time.monotonic() + 200
        while "built" not in tail(tmp_path / "load-worker-load2.log"):
            assert time.monotonic() < deadline, tail(tmp_path / "run.log")
            assert run.poll() is None, tail(tmp_path / "run.log")
            time.sleep(0.3)
        time.sleep(3.0)  # the block's load is under way
        hosts["load2"].kill()
        code = run.wait(timeout=120)
    log = tail(tmp_path / "run.log")
    assert code == exit_codes.LOAD_WORKER_LOST, log
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "invalid", log
    assert any("worker_lost" in reason for reason in report["invalid_reasons"]), report["invalid_reasons"]
