"""What the router adds to a client's latency: direct to the upstream vs through the router.

One run, paths interleaved batch by batch (their order rotating every round) so all see
the same machine state. Each request is a streamed chat of ~1 MB (4 data-URL images +
text, temperature 0) to fast local fake upstreams: by default ``benchmarks/memory_arm.py``
(answers 16 tokens from memory without parsing the request, so the arms take as little of
the two cores as an upstream can), with ``--arms fake`` the Python fake vLLM of the tests
(``tests/support/fake_upstream.py``, parses every request). The client is
``benchmarks/light_client.py`` (a bare uvloop protocol: a fraction of httpx's CPU per
request), and its own CPU per request is reported. Paths:

- ``direct``: the client calls upstream ``a``;
- ``router``: ``abserve router`` (subprocess, real SQLite store) fanning out to ``a``
  (primary, relayed) and ``b`` (shadow), as in an A/B run;
- ``router 1 arm``: the same router code with only arm ``a``: what the router itself
  costs, without a second upstream competing for the same cores;
- ``floor``: ``benchmarks/floor_proxy.py``, the least a Python proxy in the router's
  place does (read the body, parse it once, forward it to ``a``, relay the bytes): what
  this machine charges for the hop itself;
- ``vllm-router (Rust)``: vLLM's own router (the ``vllm-router`` package, Rust, one
  upstream ``a``, round robin, at its defaults but for warnings-only logs and a 1 s
  check for the upstream at start): the reference the issue measured the router against,
  in the same run (left out when the package is not installed: it is in the ``dev``
  extra for Linux x86-64 only);
- ``router N workers`` (``--workers N``): ``abserve router --workers N`` with the same two
  arms, recording into a throwaway PostgreSQL server (several workers need it);
- ``baseline`` (``--baseline REV [REV ...]``): the router as it was at each git revision
  ``REV`` (exported to a temporary directory), two arms, for before/after in one run;
- ``router before_store`` (``--before-store``): the router with ``acknowledge:
  before_store``, two arms: the client's answer does not wait for the store's commit (the
  default ``router`` path waits: acknowledged means stored).

Levels: 1, 16 and 64 concurrent streams. Reports TTFT (first body bytes) and end-to-end
(``[DONE]``) p50/p99 per path and their difference from ``direct``, each path's
throughput (requests over the time its own batches took), each router's CPU
time per request (over the whole level, so records written after the answer count),
and the shadow upstream's CPU per request.

    .venv/bin/python -m benchmarks.router_overhead [--quick] [--baseline REV ...] [--arms fake]
        [--levels 1:200,16:480] [--before-store]

Writes the table into ``benchmarks/router_overhead.md`` between the result markers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.util
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
import psutil
import uvloop
import yaml
from benchmarks.light_client import LightClient
from tests.support.fake_upstream import free_port
from tests.support.postgres import throwaway_postgres

ROOT = Path(__file__).resolve().parents[1]

LEVELS = {1: 200, 16: 480, 64: 512}  # concurrency -> requests per path
QUICK = {1: 40, 16: 96, 64: 128}
MD = Path(__file__).with_suffix(".md")
BEFORE_STORE = "router before_store"
TWO_ARMS = {"router", BEFORE_STORE}  # and the baseline: the paths whose requests also reach ``b``
Sample = tuple[float, float]
RUST = "vllm-router (Rust)"


def make_body() -> bytes:
    rng = random.Random(7)
    parts: list[dict[str, object]] = [{"type": "text", "text": "Compare these pictures. " * 40}]
    for _ in range(4):
        raw = rng.randbytes(190_000)
        parts.append({"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(raw).decode()}})
    body = {"model": "fake-model", "stream": True, "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": parts}]}
    return orjson.dumps(body)


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_up(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def start_rust_router(upstream: int) -> tuple[subprocess.Popen[bytes], int] | None:
    """vLLM's Rust router in front of ``upstream`` and its port, or None when not installed."""
    if importlib.util.find_spec("vllm_router") is None:
        return None
    port = free_port()
    return spawn(["-m", "vllm_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
                  "--worker-urls", f"http://127.0.0.1:{upstream}", "--policy", "round_robin",
                  "--log-level", "warning", "--worker-startup-check-interval", "1"]), port


def start_router(tmp: Path, name: str, arms: dict[str, int], pythonpath: str | None,
                 workers: int = 1, database_url: str | None = None,
                 extra: dict[str, object] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """An ``abserve router`` subprocess (code from ``pythonpath`` when given) and its port;
    ``extra``: more router settings."""
    port = free_port()
    config: dict[str, object] = {
        "arms": {n: {"url": f"http://127.0.0.1:{p}"} for n, p in arms.items()},
        "primary": "a", "dev_mode": True, "run_dir": str(tmp / name), "port": port,
        "max_concurrency": 1024, **(extra or {})}
    if database_url:
        config["database_url"] = database_url
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    args = ["-m", "abserve", "router", "--config", str(tmp / f"{name}.yaml")]
    return spawn([*args, "--workers", str(workers)] if workers > 1 else args, env), port


async def batch(client: LightClient, n: int) -> list[Sample]:
    return list(await asyncio.gather(*(client.one() for _ in range(n))))


async def timed_batch(client: LightClient, n: int) -> tuple[list[Sample], float]:
    """A batch's samples and the seconds it took (its last answer's end)."""
    t = time.perf_counter()
    got = await batch(client, n)
    return got, time.perf_counter() - t


def cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of a process and its children (a router's supervisor and workers)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = p.cpu_times()
            total += times.user + times.system
    return total


def own_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of the process alone (the benchmark's own: the load client)."""
    times = proc.cpu_times()
    return float(times.user + times.system)


async def measure(ports: dict[str, int], procs: dict[str, psutil.Process],
                  shadow: psutil.Process, body: bytes,
                  levels: dict[int, int]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    paths = list(ports)
    me = psutil.Process()
    for conc, total in levels.items():
        clients = {p: LightClient("127.0.0.1", ports[p], "/v1/chat/completions", body)
                   for p in paths}
        samples: dict[str, list[Sample]] = {p: [] for p in paths}
        busy = dict.fromkeys(paths, 0.0)  # seconds each path's batches took
        for path in paths:  # open and warm every path's connections
            await batch(clients[path], conc)
        await asyncio.sleep(1.0)
        cpu0 = {p: cpu_s(proc) for p, proc in procs.items()}
        shadow0, me0 = cpu_s(shadow), own_cpu_s(me)
        for i in range(max(1, total // conc)):
            for path in paths[i % len(paths):] + paths[:i % len(paths)]:
                got, took = await timed_batch(clients[path], conc)
                samples[path] += got
                busy[path] += took
        client_cpu = (own_cpu_s(me) - me0) * 1000 / sum(len(v) for v in samples.values())
        await asyncio.sleep(1.0)  # records are written after the answers
        cpu = {p: (cpu_s(proc) - cpu0[p]) * 1000 / len(samples[p])
               for p, proc in procs.items()}
        shadow_n = sum(len(samples[p]) for p in paths if p in TWO_ARMS or "baseline" in p)
        row = summarize(conc, samples, cpu, (cpu_s(shadow) - shadow0) * 1000 / shadow_n, busy)
        row["client_cpu"] = client_cpu
        rows.append(row)
        for client in clients.values():
            client.close()
        print(row, flush=True)
    return rows


def summarize(conc: int, samples: dict[str, list[Sample]], cpu: dict[str, float],
              shadow_cpu: float, busy: dict[str, float]) -> dict[str, object]:
    stats: dict[str, dict[str, float]] = {}
    for path, got in samples.items():
        st = {"n": float(len(got)), "rps": len(got) / busy[path] if busy[path] else 0.0}
        for metric, idx in (("ttft", 0), ("e2e", 1)):
            for q in (50, 99):
                st[f"{metric}_p{q}"] = float(np.percentile([s[idx] for s in got], q)) * 1000
        st["cpu"] = cpu.get(path, float("nan"))
        stats[path] = st
    return {"concurrency": conc, "paths": stats, "shadow_cpu": shadow_cpu}


def table(rows: list[dict[str, object]]) -> str:
    lines = ["| streams | path | n | TTFT p50 (added) | TTFT p99 (added) | E2E p50 (added) "
             "| E2E p99 (added) | req/s | router CPU ms/req |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        paths: dict[str, dict[str, float]] = row["paths"]  # type: ignore[assignment]
        direct = paths["direct"]
        for path, st in paths.items():
            cells = []
            for key in ("ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99"):
                added = "" if path == "direct" else f" (**{st[key] - direct[key]:+.1f}**)"
                cells.append(f"{st[key]:.1f}{added}")
            cpu = "" if path == "direct" else f"{st['cpu']:.2f}"
            lines.append(f"| {row['concurrency']} | {path} | {int(st['n'])} | "
                         + " | ".join(cells) + f" | {st['rps']:.0f} | {cpu} |")
    shadow = ", ".join(f"{r['concurrency']} streams {r['shadow_cpu']:.2f}" for r in rows)
    client = ", ".join(f"{r['concurrency']} streams {r['client_cpu']:.2f}" for r in rows)
    return ("\n".join(lines) + f"\n\nShadow upstream `b` CPU ms per request it served: {shadow}."
            f" Load client CPU ms per request: {client}.")


def write_md(text: str) -> None:
    md = MD.read_text() if MD.exists() else "<!-- results -->\n<!-- /results -->\n"
    block = f"<!-- results -->\n{text}\n<!-- /results -->"
    MD.write_text(re.sub(r"<!-- results -->.*<!-- /results -->", lambda _: block, md,
                         flags=re.S))


def export(rev: str, dest: Path) -> str:
    """The router package as it was at ``rev``, as a PYTHONPATH entry."""
    archive = subprocess.run(["git", "archive", rev, "service/abserve"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return str(dest / "service")


def main() -> None:
    parser = argparse.ArgumentParser(description="router overhead vs direct")
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--baseline", metavar="REV", nargs="+", default=[],
                        help="also run the router at each git REV")
    parser.add_argument("--arms", choices=["memory", "fake"], default="memory",
                        help="fake arms: memory_arm.py (default) or the tests' fake vLLM")
    parser.add_argument("--levels", help="concurrency:requests,... (default 1:200,16:480,64:512)")
    parser.add_argument("--before-store", action="store_true",
                        help="also the router with acknowledge: before_store (no commit wait)")
    parser.add_argument("--workers", type=int, default=1,
                        help="also a path through abserve router --workers N (PostgreSQL)")
    args = parser.parse_args()
    body = make_body()
    ups = {"a": free_port(), "b": free_port()}
    arm = (["benchmarks/memory_arm.py"] if args.arms == "memory"
           else ["tests/support/fake_upstream.py"])
    procs = [spawn([*arm, "--port", str(ups[n]), "--tokens", "16"]) for n in ups]
    levels = QUICK if args.quick else LEVELS
    if args.levels:
        levels = {int(c): int(n) for c, n in (x.split(":") for x in args.levels.split(","))}
    with tempfile.TemporaryDirectory() as tmpdir, contextlib.ExitStack() as stack:
        tmp = Path(tmpdir)
        routers = {"router": start_router(tmp, "router", ups, None),
                   "router 1 arm": start_router(tmp, "one", {"a": ups["a"]}, None)}
        if args.before_store:
            routers[BEFORE_STORE] = start_router(tmp, "before", ups, None,
                                                 extra={"acknowledge": "before_store"})
        floor_port = free_port()
        routers["floor"] = (spawn(["benchmarks/floor_proxy.py", "--port", str(floor_port),
                                   "--upstream", f"http://127.0.0.1:{ups['a']}"]), floor_port)
        rust = start_rust_router(ups["a"])
        if rust:
            routers[RUST] = rust
        if args.workers > 1:
            pg = stack.enter_context(throwaway_postgres())
            name = f"router {args.workers} workers"
            routers[name] = start_router(tmp, "workers", ups, None, args.workers,
                                         pg.create_database("overhead"))
            TWO_ARMS.add(name)
        for rev in reversed(args.baseline):
            (tmp / rev).mkdir()
            old = export(rev, tmp / rev)
            routers = {f"baseline {rev}": start_router(tmp, f"base-{rev}", ups, old), **routers}
        procs += [proc for proc, _ in routers.values()]
        try:
            for port in ups.values():
                wait_up(f"http://127.0.0.1:{port}/health")
            for name, (_, port) in routers.items():
                wait_up(f"http://127.0.0.1:{port}/{'health' if name == RUST else 'livez'}")
            ports = {"direct": ups["a"]} | {name: port for name, (_, port) in routers.items()}
            watched = {name: psutil.Process(proc.pid) for name, (proc, _) in routers.items()}
            t = time.perf_counter()
            rows = uvloop.run(measure(ports, watched, psutil.Process(procs[1].pid), body,
                                       levels))
            took = time.perf_counter() - t
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    header = (f"Last run: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}, body {len(body) / 1e6:.2f} MB, "
              f"arms {args.arms}, "
              f"{took:.0f} s. Times in ms; added = path − direct at the same percentile.")
    text = header + "\n\n" + table(rows)
    print(text)
    if not args.quick and not args.levels:
        write_md(text)


if __name__ == "__main__":
    main()
