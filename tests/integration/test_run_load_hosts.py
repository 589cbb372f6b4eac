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
import yaml
from tests.support.netns import Host, private_net
from tests.support.scale_out import ABSERVE, MASTER_PORT, start_fake_arm, start_load_worker, tail

from abserve.base import exit_codes

REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, arms: list[str], orch: Host, requests: int) -> Path:
    """Two ``url:`` arms, the load from two load hosts, judged on TPOT."""
    policy = {"name": "load-hosts", "min_samples": 8, "warmup_requests": 0,
              "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.5,
                           "allowed_absolute": 0.01, "critical": True}]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "model").mkdir(exist_ok=True)  # url: arms load no model
    config = {
        "name": "load-hosts",
        "model": {"path": str(tmp_path / "model"), "served_name": "fake-model"},
        "arms": {"a": {"url": arms[0], "role": "baseline"}, "b": {"url": arms[1], "role": "candidate"}},
        "load": {"users": 4, "profiles": [{"profile": "interleaved", "requests": requests}],
                 "workers": {"count": 2, "bind": f"{orch.ip}:{MASTER_PORT}", "connect_timeout_s": 60}},
        "policy": str(tmp_path / "policy.yaml"),
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.timeout(300)
def test_a_load_host_killed_mid_run_stops_the_run_with_exit_7_and_a_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with private_net("orch", "load1", "load2", "arms") as hosts:
        arms = [start_fake_arm(hosts["arms"], tmp_path, delay_s=0.05),
                start_fake_arm(hosts["arms"], tmp_path, delay_s=0.05, port=8001)]
        for name in ("load1", "load2"):
            start_load_worker(hosts[name], hosts["orch"], tmp_path)
        env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
        run = hosts["orch"].popen([*ABSERVE, "run", str(experiment(tmp_path, arms, hosts["orch"], 400)),
                                   "--out", str(out)], log=tmp_path / "run.log", env=env, cwd=REPO)
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
