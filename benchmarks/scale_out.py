"""Exchanges per second through 1, 2, 4 router replicas and 1, 2, 4 load hosts, on fake arms,
on namespaced hosts of this machine (``tests.support.netns``) against the same on one host.

Each configuration is a fresh private network: a PostgreSQL host, the arms' host (two fake
arms, ``tests/support/fake_upstream.py``, 4 tokens, no delay: as cheap as an arm can be), the
router hosts (the first ``abserve router`` owns the run, the others ``--join`` it) and the
load: ``abserve load`` on an orchestrator host with ``--load-workers L`` and one
``abserve load-worker`` per load host, spread over the replicas with ``--also-host``. "One
host" runs the same processes in one namespace instead: ``abserve router --workers R`` and
``abserve load --processes L``. The load is closed-loop, ``--users`` in flight, the
``interleaved`` profile (bodies of ~40 KB with images).

Per configuration: exchanges/s (answered requests over the load's span), and CPU seconds per
exchange of each role (router, load, store, arms), sampled from the PIDs of each host's
namespace while the load runs. This machine has 2 cores for every namespace together, so the
table shows where the machine runs out; the CPU per exchange of each role is what a cluster
needs (``benchmarks/scale-out.md`` projects it).

    .venv/bin/python -m benchmarks.scale_out [--requests 600] [--users 32] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from tests.support.netns import Host, _netns_pids, postgres_on, private_net
from tests.support.scale_out import (
    ABSERVE,
    MASTER_PORT,
    ROUTER_PORT,
    router_config,
    start_fake_arm,
    start_load_worker,
)

from abserve.traffic.timing import read_timings

ROLES = ("router", "load", "store", "arms")


@dataclass
class CpuSampler:
    """CPU seconds used by each role's hosts while it runs (every PID of their namespaces)."""

    roles: dict[str, list[Host]]
    seen: dict[tuple[str, int], float] = field(default_factory=dict)
    base: dict[tuple[str, int], float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _sample(self, into: dict[tuple[str, int], float]) -> None:
        for role, hosts in self.roles.items():
            for host in hosts:
                for pid in _netns_pids(host.ns):
                    try:
                        t = psutil.Process(pid).cpu_times()
                        into[(role, pid)] = t.user + t.system
                    except psutil.Error:
                        continue

    def __enter__(self) -> CpuSampler:
        self._sample(self.base)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self._sample(self.seen)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(self.seen)

    def cpu(self, role: str) -> float:
        return sum(v - self.base.get(key, 0.0) for key, v in self.seen.items() if key[0] == role)


def _rate(out: Path) -> tuple[float, int, float, float]:
    """Exchanges/s over the load's span, answered requests, mean body bytes, median e2e (s)."""
    records = [r for r in read_timings([out / "timings.jsonl"]) if r.ok]
    if not records:
        return 0.0, 0, 0.0, 0.0
    start = min(r.sent_at for r in records)
    end = max(r.sent_at + (r.e2e_s or 0.0) for r in records)
    return (len(records) / (end - start), len(records),
            statistics.fmean(r.request_bytes for r in records),
            statistics.median(r.e2e_s or 0.0 for r in records))


def one_config(routers: int, loads: int, one_host: bool, requests: int, users: int,
               logs: Path) -> dict[str, object]:
    names = ["db", "arms", "one"] if one_host else [
        "db", "arms", "orch", *(f"r{i}" for i in range(routers)), *(f"l{i}" for i in range(loads))]
    run_id = f"scale-{routers}r{loads}l{'-one' if one_host else ''}"
    out = logs / run_id
    with private_net(*names) as hosts, postgres_on(hosts["db"]) as db:
        arms = {"a": start_fake_arm(hosts["arms"], logs, delay_s=0.0),
                "b": start_fake_arm(hosts["arms"], logs, delay_s=0.0, port=8001)}
        config = router_config(logs / f"{run_id}.yaml", arms, db, run_id)
        common = ["--profile", "interleaved", "--requests", str(requests), "--users", str(users),
                  "--seed", "5", "--model", "fake-model", "--out", str(out), "--max-error-rate", "0.5"]
        if one_host:
            one = hosts["one"]
            _router(one, config, logs, run_id, ["--workers", str(routers)] if routers > 1 else [])
            cmd = [*ABSERVE, "load", "--host", f"http://{one.ip}:{ROUTER_PORT}",
                   "--processes", str(loads), *common]
            roles = {"router": [one], "load": [], "store": [hosts["db"]], "arms": [hosts["arms"]]}
            loader = one
        else:
            urls = [_router(hosts[f"r{i}"], config, logs, run_id, ["--join"] if i else [])
                    for i in range(routers)]
            for i in range(loads):
                start_load_worker(hosts[f"l{i}"], hosts["orch"], logs, runs=1)
            cmd = [*ABSERVE, "load", "--host", urls[0],
                   *[a for u in urls[1:] for a in ("--also-host", u)], "--load-workers", str(loads),
                   "--master-bind", f"{hosts['orch'].ip}:{MASTER_PORT}", "--worker-wait", "60", *common]
            roles = {"router": [hosts[f"r{i}"] for i in range(routers)],
                     "load": [hosts["orch"], *(hosts[f"l{i}"] for i in range(loads))],
                     "store": [hosts["db"]], "arms": [hosts["arms"]]}
            loader = hosts["orch"]
        with CpuSampler(roles) as sampler:
            done = loader.run(cmd, timeout=600)
        if done.returncode:
            raise RuntimeError(f"{run_id}: load exited {done.returncode}: {done.stderr[-1500:]}")
        rate, answered, body, e2e = _rate(out)
        cpu = {role: sampler.cpu(role) for role in ROLES}
    if one_host:  # the load ran in the router's namespace: its CPU is what the router's host
        cpu["load"] = 0.0  # used beyond the router processes, not separable here
    per = {r: 1000 * c / max(answered, 1) for r, c in cpu.items()}
    print(f"{'one host' if one_host else 'hosts':8} routers {routers} loads {loads}: "
          f"{rate:7.1f} exchanges/s ({answered} answered, {body / 1024:.0f} KiB bodies, "
          f"e2e p50 {1000 * e2e:.0f} ms); CPU ms/exchange "
          + ", ".join(f"{k} {v:.2f}" for k, v in per.items()), flush=True)
    return {"routers": routers, "loads": loads, "one_host": one_host, "rate": rate,
            "answered": answered, "body_bytes": body, "e2e_p50_ms": 1000 * e2e,
            "cpu_ms_per_exchange": per}


def _router(host: Host, config: Path, logs: Path, run_id: str, extra: list[str]) -> str:
    from tests.support.netns import wait_port

    proc = host.popen([*ABSERVE, "router", "--config", str(config), "--host", host.ip, *extra],
                      log=logs / f"router-{run_id}-{host.name}.log")
    wait_port(host, host.ip, ROUTER_PORT, proc=proc)
    return f"http://{host.ip}:{ROUTER_PORT}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="1 and 2 only")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = parser.parse_args()
    sizes = (1, 2) if args.quick else (1, 2, 4)
    plan = [(r, 2, False) for r in sizes] + [(2, n, False) for n in sizes if n != 2]
    plan += [(1, 1, True), (2, 2, True)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="abserve-scale-out-") as tmp:
        for routers, loads, one_host in plan:
            rows.append(one_config(routers, loads, one_host, args.requests, args.users, Path(tmp)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    load = psutil.getloadavg()
    print(f"load average at the end: {load[0]:.1f} ({psutil.cpu_count()} cores)")
    subprocess.run(["ip", "netns", "list"], check=False)


if __name__ == "__main__":
    main()
