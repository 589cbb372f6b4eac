"""How many 1 MB streamed requests per second the router serves, at 1 and 2 worker processes.

Everything but the router is made as cheap as it can be, and measured, so that the router
is what runs out: two fake arms answering from memory (``benchmarks/memory_arm.py``, no
parsing), a light uvloop load client (``benchmarks/light_client.py``) keeping ``--streams``
requests in flight, and a real PostgreSQL store (a throwaway server, ``fsync=off``). Both
routers (``abserve router --workers 1`` and ``--workers 2``, two arms, recording) run
side by side; rounds of ``--seconds`` alternate between them, so both see the same machine.

Per round: requests/s; CPU seconds per request of the router (supervisor and workers),
the client and the arms; and the CPU the rest of the machine used meanwhile (other jobs),
in cores. Wall throughput on a shared 2-core machine says how much of the machine the
router got; router CPU per request says what a request costs wherever it runs: the
projection for a host with cores to spare is ``1000 / (router CPU ms per request)``
requests/s per router core. After the rounds every router is stopped and the store is
checked: every request the client had answered is stored exactly once.

    .venv/bin/python -m benchmarks.router_capacity [--rounds 3] [--seconds 10] [--streams 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import uvloop
import yaml
from benchmarks.light_client import LightClient
from benchmarks.router_overhead import cpu_s, make_body, spawn, wait_up
from tests.support.fake_upstream import free_port
from tests.support.postgres import throwaway_postgres

from abserve.store import Store

MD = Path(__file__).with_name("router_overhead.md")  # results beside the latency table


def tree_cpu(pid: int) -> float:
    return cpu_s(psutil.Process(pid))


def machine_busy_s() -> float:
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + t.steal)


async def load(client: LightClient, streams: int, seconds: float) -> int:
    """Keep ``streams`` requests in flight for ``seconds``; the number answered."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await client.one()
            done += 1

    await asyncio.gather(*(worker() for _ in range(streams)))
    return done


Results = dict[int, list[dict[str, float]]]


async def rounds(routers: dict[int, tuple[subprocess.Popen[bytes], int]], arms: list[int],
                 body: bytes, args: argparse.Namespace) -> tuple[Results, dict[int, int]]:
    """The rounds' measurements per worker count, and every request answered per router."""
    clients = {w: LightClient("127.0.0.1", port, "/v1/chat/completions", body)
               for w, (_, port) in routers.items()}
    answered = dict.fromkeys(routers, 0)
    for w in routers:  # open connections, warm caches
        answered[w] += await load(clients[w], args.streams, 2.0)
    out: dict[int, list[dict[str, float]]] = {w: [] for w in routers}
    me = psutil.Process()
    for i in range(args.rounds):
        order = list(routers) if i % 2 == 0 else list(routers)[::-1]
        for w in order:
            pid = routers[w][0].pid
            cpu0, me0, busy0 = tree_cpu(pid), me.cpu_times(), machine_busy_s()
            arms0 = sum(tree_cpu(a) for a in arms)
            t0 = time.perf_counter()
            n = await load(clients[w], args.streams, args.seconds)
            answered[w] += n
            wall = time.perf_counter() - t0
            router_s = tree_cpu(pid) - cpu0
            me1 = me.cpu_times()
            client_s = (me1.user - me0.user) + (me1.system - me0.system)
            arms_s = sum(tree_cpu(a) for a in arms) - arms0
            other_s = machine_busy_s() - busy0 - router_s - client_s - arms_s
            row = {"n": n, "rps": n / wall, "router_ms": router_s * 1000 / n,
                   "router_cores": router_s / wall, "client_ms": client_s * 1000 / n,
                   "arms_ms": arms_s * 1000 / n, "other_cores": max(0.0, other_s / wall)}
            out[w].append(row)
            print(w, {k: round(v, 2) for k, v in row.items()}, flush=True)
            await asyncio.sleep(1.0)  # the router's records go out between rounds
    for c in clients.values():
        c.close()
    return out, answered


def table(results: Results) -> str:
    def med(w: int, key: str) -> float:
        return float(np.median([r[key] for r in results[w]]))

    lines = ["| workers | rounds | requests/s (median) | router CPU ms/req | router cores used "
             "| client CPU ms/req | arms CPU ms/req | other jobs, cores | projected req/s per "
             "router core |", "|---|---|---|---|---|---|---|---|---|"]
    for w in sorted(results):
        lines.append(f"| {w} | {len(results[w])} | {med(w, 'rps'):.0f} | "
                     f"{med(w, 'router_ms'):.2f} | {med(w, 'router_cores'):.2f} | "
                     f"{med(w, 'client_ms'):.2f} | {med(w, 'arms_ms'):.2f} | "
                     f"{med(w, 'other_cores'):.2f} | {1000 / med(w, 'router_ms'):.0f} |")
    if 1 in results and 2 in results:
        ratios = [b["rps"] / a["rps"] for a, b in zip(results[1], results[2], strict=True)]
        lines.append("\n2 workers / 1 worker, requests/s per round: "
                     + ", ".join(f"{r:.2f}" for r in ratios)
                     + f" (median {np.median(ratios):.2f}).")
    return "\n".join(lines)


def check_store(url: str, run_id: str, answered: int) -> str:
    with Store.open(url) as store:
        ids = [e.request_id for e in store.iter_exchanges(run_id)]
    ok = len(ids) == len(set(ids)) == answered
    return (f"{run_id}: {answered} answered, {len(ids)} stored, {len(set(ids))} distinct: "
            + ("each stored exactly once" if ok else "MISMATCH"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    body = make_body()
    ports = [free_port(), free_port()]
    arms = [spawn(["benchmarks/memory_arm.py", "--port", str(p), "--tokens", "16"])
            for p in ports]
    counts = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory() as tmpdir, throwaway_postgres() as pg:
        tmp = Path(tmpdir)
        routers: dict[int, tuple[subprocess.Popen[bytes], int]] = {}
        urls: dict[int, str] = {}
        try:
            for w in counts:
                urls[w] = pg.create_database(f"capacity_{w}")
                port = free_port()
                config = {"arms": {"a": {"url": f"http://127.0.0.1:{ports[0]}"},
                                   "b": {"url": f"http://127.0.0.1:{ports[1]}"}},
                          "primary": "a", "dev_mode": True, "run_dir": str(tmp / f"w{w}"),
                          "run_id": f"capacity-{w}w", "port": port, "database_url": urls[w],
                          "max_concurrency": 1024}
                (tmp / f"w{w}.yaml").write_text(yaml.safe_dump(config))
                routers[w] = (spawn(["-m", "abserve", "router", "--config",
                                     str(tmp / f"w{w}.yaml"), "--workers", str(w)]), port)
            for p in ports:
                wait_up(f"http://127.0.0.1:{p}/health")
            for _, port in routers.values():
                wait_up(f"http://127.0.0.1:{port}/livez")
            t = time.perf_counter()
            results, answered = uvloop.run(rounds(routers, [a.pid for a in arms], body, args))
            took = time.perf_counter() - t
        finally:
            for proc, _ in routers.values():
                proc.send_signal(signal.SIGTERM)
            for proc, _ in routers.values():
                proc.wait(timeout=120)
            for a in arms:
                a.terminate()
                a.wait(timeout=30)
        checks = [check_store(urls[w], f"capacity-{w}w", answered[w]) for w in counts]
    header = (f"Last run: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load "
              f"average {os.getloadavg()[0]:.1f}, body {len(body) / 1e6:.2f} MB, "
              f"{args.streams} streams, {args.rounds} rounds of {args.seconds:.0f} s per "
              f"worker count, {took:.0f} s.")
    text = header + "\n\n" + table(results) + "\n\nStore check: " + "; ".join(checks) + "."
    print(text)
    md = MD.read_text()
    MD.write_text(re.sub(r"<!-- capacity -->.*<!-- /capacity -->",
                         lambda _: f"<!-- capacity -->\n{text}\n<!-- /capacity -->", md,
                         flags=re.S))


if __name__ == "__main__":
    main()
