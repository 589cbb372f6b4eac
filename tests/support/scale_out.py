"""Commands of a scale-out run on namespaced hosts (``tests.support.netns``): a fake arm, an
``abserve load`` master, ``abserve load-worker`` loops and ``abserve router`` replicas, each
started in its own host, as a user would on separate machines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from tests.support.netns import Host, wait_port

ABSERVE = [sys.executable, "-m", "abserve"]
MASTER_PORT = 5557
ARM_PORT = 8000
ROUTER_PORT = 8100


def start_fake_arm(host: Host, logs: Path, tokens: int = 4, delay_s: float = 0.05,
                   port: int = ARM_PORT) -> str:
    """A fake OpenAI-compatible arm (``fake_upstream.py``) on ``host``; its URL."""
    script = Path(__file__).with_name("fake_upstream.py")
    proc = host.popen([sys.executable, str(script), "--host", host.ip, "--port", str(port),
                       "--tokens", str(tokens), "--token-delay-s", str(delay_s)],
                      log=logs / f"arm-{host.name}-{port}.log",
                      env={"PYTHONPATH": str(Path(__file__).parents[2])} | _env())
    wait_port(host, host.ip, port, proc=proc)
    return f"http://{host.ip}:{port}"


def start_load_worker(host: Host, master: Host, logs: Path, runs: int = 0) -> subprocess.Popen[bytes]:
    """``abserve load-worker --master ORCH:5557`` on a load host."""
    return host.popen([*ABSERVE, "load-worker", "--master", f"{master.ip}:{MASTER_PORT}",
                       "--runs", str(runs)], log=logs / f"load-worker-{host.name}.log")


def load_command(master: Host, targets: list[str], out: Path, requests: int, workers: int,
                 users: int, wait_s: float = 60.0, run_id: str = "scale-out") -> list[str]:
    """``abserve load`` from the orchestrator host through ``workers`` load hosts."""
    extra = [arg for t in targets[1:] for arg in ("--also-host", t)]
    return [*ABSERVE, "load", "--host", targets[0], *extra, "--profile", "interleaved",
            "--requests", str(requests), "--users", str(users), "--seed", "5",
            "--model", "fake-model", "--run-id", run_id, "--out", str(out),
            "--max-error-rate", "0.5", "--load-workers", str(workers),
            "--master-bind", f"{master.ip}:{MASTER_PORT}", "--worker-wait", str(wait_s)]


def router_config(path: Path, arms: dict[str, str], database_url: str, run_id: str) -> Path:
    """One router settings file for every replica of run ``run_id`` (each gets ``--host``)."""
    settings = {"arms": {name: {"url": url, "role": "candidate" if i else "baseline"}
                         for i, (name, url) in enumerate(arms.items())},
                "primary": next(iter(arms)), "run_id": run_id, "run_dir": str(path.parent),
                "database_url": database_url, "port": ROUTER_PORT, "dev_mode": True}
    path.write_text(yaml.safe_dump(settings))
    return path


def start_router(host: Host, config: Path, logs: Path, join: bool = False) -> str:
    """``abserve router`` (the run's owner) or ``abserve router --join`` on ``host``; its URL."""
    proc = host.popen([*ABSERVE, "router", "--config", str(config), "--host", host.ip,
                       *(["--join"] if join else [])], log=logs / f"router-{host.name}.log")
    wait_port(host, host.ip, ROUTER_PORT, proc=proc)
    return f"http://{host.ip}:{ROUTER_PORT}"


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


STORE_QUERY = """
import json, sys
from abserve.store import Store
with Store.open(sys.argv[1]) as store:
    run = store.get_run(sys.argv[2])
    ids = [e.request_id for e in store.iter_exchanges(sys.argv[2])] if run else []
print(json.dumps({"status": run.status if run else None, "request_ids": ids}))
"""


def stored_run(host: Host, database_url: str, run_id: str) -> dict[str, object]:
    """The run's effective status and its stored exchanges' request ids, read from ``host``
    (the store is reachable only inside the namespaced network)."""
    import json

    done = host.run([sys.executable, "-c", STORE_QUERY, database_url, run_id])
    if done.returncode:
        raise RuntimeError(f"store query failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout))


def experiment(tmp_path: Path, arms: list[str], load: dict[str, object], name: str) -> Path:
    """An ``abserve run`` config on two ``url:`` arms (fake vLLM servers), judged on TPOT alone
    (their outputs agree), with ``load`` as its load section."""
    policy = {"name": name, "min_samples": 8, "warmup_requests": 0,
              "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.5,
                           "allowed_absolute": 0.01, "critical": True}]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "model").mkdir(exist_ok=True)  # url: arms load no model
    config = {"name": name, "model": {"path": str(tmp_path / "model"), "served_name": "fake-model"},
              "arms": {"a": {"url": arms[0], "role": "baseline"},
                       "b": {"url": arms[1], "role": "candidate"}},
              "load": load, "policy": str(tmp_path / "policy.yaml")}
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def tail(path: Path) -> str:
    """The end of a log, for an assertion's message."""
    return path.read_text(errors="replace")[-3000:] if path.is_file() else f"({path} missing)"


def count_lines(path: Path) -> int:
    """Lines written so far (a load's timings file, as it goes)."""
    return path.read_bytes().count(b"\n") if path.is_file() else 0
