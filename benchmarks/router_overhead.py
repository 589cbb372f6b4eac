"""What the router adds to a client's latency: direct to the upstream vs through the router.

One run, paths interleaved batch by batch (direct, router, direct, ...) so both see the
same machine state. Each request is a streamed chat of ~1 MB (4 data-URL images + text)
to a fast local fake upstream (``tests/support/fake_upstream.py``, 16 tokens, no delay);
the router (``abserve router``, subprocess, real SQLite store) fans out to two such
upstreams (``a`` primary, ``b`` shadow), as in an A/B run. Levels: 1, 16 and 64
concurrent streams. Reports TTFT (first body bytes) and end-to-end (``[DONE]``) p50/p99
per path and the difference, plus the router's CPU time per request.

    .venv/bin/python benchmarks/router_overhead.py [--quick]

Writes the table into ``benchmarks/router_overhead.md`` between the result markers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.fake_upstream import free_port  # noqa: E402

LEVELS = {1: 200, 16: 480, 64: 512}  # concurrency -> requests per path
QUICK = {1: 40, 16: 96, 64: 128}
MD = Path(__file__).with_suffix(".md")


def make_body() -> bytes:
    rng = random.Random(7)
    parts: list[dict[str, object]] = [{"type": "text", "text": "Compare these pictures. " * 40}]
    for _ in range(4):
        raw = rng.randbytes(190_000)
        parts.append({"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(raw).decode()}})
    body = {"model": "fake-model", "stream": True, "max_tokens": 16,
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


async def one(client: httpx.AsyncClient, url: str, body: bytes) -> tuple[float, float]:
    t0 = time.perf_counter()
    ttft = None
    async with client.stream("POST", url, content=body,
                             headers={"content-type": "application/json"}) as resp:
        resp.raise_for_status()
        tail = b""
        async for chunk in resp.aiter_raw():
            if ttft is None:
                ttft = time.perf_counter() - t0
            tail = (tail + chunk)[-32:]
    if not tail.endswith(b"data: [DONE]\n\n"):
        raise RuntimeError("stream did not end with [DONE]")
    return ttft or 0.0, time.perf_counter() - t0


async def batch(client: httpx.AsyncClient, url: str, body: bytes, n: int) -> list[tuple[float,
                                                                                        float]]:
    return list(await asyncio.gather(*(one(client, url, body) for _ in range(n))))


async def measure(urls: dict[str, str], router_proc: psutil.Process, body: bytes,
                  levels: dict[int, int]) -> list[dict[str, float]]:
    rows = []
    limits = httpx.Limits(max_connections=128, max_keepalive_connections=128,
                          keepalive_expiry=2.0)  # under the servers' 5 s keep-alive
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        for conc, total in levels.items():
            samples: dict[str, list[tuple[float, float]]] = {"direct": [], "router": []}
            await batch(client, urls["router"], body, conc)  # warm both paths' pools
            await batch(client, urls["direct"], body, conc)
            cpu = 0.0
            for _ in range(max(1, total // conc)):
                for path in ("direct", "router"):
                    before = sum(router_proc.cpu_times()[:2])
                    samples[path] += await batch(client, urls[path], body, conc)
                    if path == "router":
                        cpu += sum(router_proc.cpu_times()[:2]) - before
            rows.append(summarize(conc, samples, cpu))
            print(rows[-1], flush=True)
    return rows


def summarize(conc: int, samples: dict[str, list[tuple[float, float]]],
              router_cpu_s: float) -> dict[str, float]:
    row: dict[str, float] = {"concurrency": conc, "n": len(samples["router"])}
    for metric, idx in (("ttft", 0), ("e2e", 1)):
        for q in (50, 99):
            d = float(np.percentile([s[idx] for s in samples["direct"]], q)) * 1000
            r = float(np.percentile([s[idx] for s in samples["router"]], q)) * 1000
            row[f"{metric}_p{q}_direct"], row[f"{metric}_p{q}_router"] = d, r
            row[f"{metric}_p{q}_added"] = r - d
    row["router_cpu_ms_per_req"] = router_cpu_s * 1000 / len(samples["router"])
    return row


def table(rows: list[dict[str, float]]) -> str:
    lines = ["| streams | n/path | TTFT p50 direct → router (added) | TTFT p99 (added) "
             "| E2E p50 (added) | E2E p99 (added) | router CPU ms/req |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        def cell(m: str, q: int, row: dict[str, float] = r) -> str:
            return (f"{row[f'{m}_p{q}_direct']:.1f} → {row[f'{m}_p{q}_router']:.1f} "
                    f"(**{row[f'{m}_p{q}_added']:+.1f}**)")
        lines.append(f"| {int(r['concurrency'])} | {int(r['n'])} | {cell('ttft', 50)} | "
                     f"{cell('ttft', 99)} | {cell('e2e', 50)} | {cell('e2e', 99)} | "
                     f"{r['router_cpu_ms_per_req']:.1f} |")
    return "\n".join(lines)


def write_md(text: str) -> None:
    md = MD.read_text() if MD.exists() else "<!-- results -->\n<!-- /results -->\n"
    block = f"<!-- results -->\n{text}\n<!-- /results -->"
    MD.write_text(re.sub(r"<!-- results -->.*<!-- /results -->", lambda _: block, md,
                         flags=re.S))


def main() -> None:
    parser = argparse.ArgumentParser(description="router overhead vs direct")
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    args = parser.parse_args()
    body = make_body()
    ports = {"a": free_port(), "b": free_port(), "router": free_port()}
    procs = [spawn(["tests/support/fake_upstream.py", "--port", str(ports[n]), "--tokens", "16"])
             for n in ("a", "b")]
    with tempfile.TemporaryDirectory() as tmp:
        config = {"arms": {n: {"url": f"http://127.0.0.1:{ports[n]}"} for n in ("a", "b")},
                  "primary": "a", "dev_mode": True, "run_dir": tmp, "port": ports["router"],
                  "max_concurrency": 1024}
        (Path(tmp) / "router.yaml").write_text(yaml.safe_dump(config))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        procs.append(spawn(["-m", "abserve", "router", "--config", f"{tmp}/router.yaml"], env))
        try:
            for n in ("a", "b"):
                wait_up(f"http://127.0.0.1:{ports[n]}/health")
            wait_up(f"http://127.0.0.1:{ports['router']}/livez")
            urls = {"direct": f"http://127.0.0.1:{ports['a']}/v1/chat/completions",
                    "router": f"http://127.0.0.1:{ports['router']}/v1/chat/completions"}
            t = time.perf_counter()
            rows = asyncio.run(measure(urls, psutil.Process(procs[-1].pid), body,
                                       QUICK if args.quick else LEVELS))
            took = time.perf_counter() - t
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    header = (f"Last run: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}, body {len(body) / 1e6:.2f} MB, "
              f"{took:.0f} s. Times in ms; added = router − direct at the same percentile.")
    text = header + "\n\n" + table(rows)
    print(text)
    if not args.quick:
        write_md(text)


if __name__ == "__main__":
    main()
