"""Speed and memory of ``abserve compare``: two sides of one (or more) saved runs, 100,000 requests a run.

Writes two synthetic ``vllm bench serve --save-result --save-detailed`` files (the fields vLLM 0.32
saves: ttfts, itls, latencies, output_lens, input_lens, generated_texts, errors; 8-40 output
tokens a request, lognormal latencies, the candidate 3% slower), then runs ``abserve compare
--baseline A --candidate B --out DIR`` as a child process and reports its wall time and peak RSS
(``getrusage(RUSAGE_CHILDREN).ru_maxrss``). Target (issue 49): at most 30 s and 1 GiB.

``--keyed``: in process instead, both sides as ``SavedRun`` objects with prompt keys and output
token ids (the equality path a reader that saves prompts takes), peak RSS of this process.

Usage: PYTHONPATH=service python benchmarks/unpaired_speed.py [--requests 100000] [--runs-per-side 1]
       [--dir /tmp/unpaired-speed] [--keyed]
Results: benchmarks/unpaired.md ("Speed and memory").
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from abserve.compare.policy import load_policy
from abserve.report import write_report
from abserve.saved.collect import Sides, fold_run
from abserve.saved.judge import judge_sides
from abserve.saved.matching import OutputMatcher
from abserve.saved.model import SavedRequest, SavedRun, SavedRunHeader


def write_bench(path: Path, n: int, seed: int, factor: float) -> None:
    rng = np.random.default_rng(seed)
    out_lens = rng.integers(8, 41, n)
    ttfts = 0.05 * factor * rng.lognormal(0, 0.3, n)
    with path.open("w") as f:  # written piecewise: the generator itself stays small
        f.write('{"date": "20261206-000000", "backend": "openai-chat", "model_id": "tiny-llava", '
                f'"duration": 600.0, "completed": {n}, "ttfts": ')
        json.dump(ttfts.tolist(), f)
        itls = [0.01 * factor * rng.lognormal(0, 0.25, k - 1) for k in out_lens]
        f.write(', "itls": [')
        for i, gaps in enumerate(itls):
            f.write(("," if i else "") + json.dumps([round(g, 7) for g in gaps.tolist()]))
        f.write('], "latencies": ')
        json.dump([float(t + g.sum()) for t, g in zip(ttfts, itls, strict=True)], f)
        f.write(', "output_lens": ')
        json.dump(out_lens.tolist(), f)
        f.write(', "input_lens": ')
        json.dump([400] * n, f)
        f.write(', "generated_texts": ')
        json.dump([" word" * int(k) for k in out_lens], f)
        f.write(', "errors": ')
        json.dump([""] * n, f)
        f.write("}")


def keyed(n: int, seed: int, factor: float) -> SavedRun:
    """A run as a reader that saved prompts would yield it: prompt keys and 8-40 output token ids
    per request (one request in a thousand diverging), every inter-token gap."""
    rng = np.random.default_rng(seed)

    def requests() -> Iterator[SavedRequest]:
        for i in range(n):
            k = 8 + (i * 7919) % 33  # the prompt decides the output's length, as greedy decoding does
            gaps = 0.01 * factor * rng.lognormal(0, 0.25, k - 1)
            ttft = 0.05 * factor * float(rng.lognormal(0, 0.3))
            ids = tuple(range(i % 997, i % 997 + k))
            if seed % 2 == 0 and i % 1000 == 0:
                ids = (*ids[:3], -1, *ids[4:])
            yield SavedRequest(ok=True, ttft=ttft, tpot=float(gaps.mean()), e2e=ttft + float(gaps.sum()),
                               itl=tuple(gaps.tolist()), output_tokens=k, prompt_key=f"prompt-{i:08d}",
                               output_token_ids=ids)

    return SavedRun(SavedRunHeader(tool="aiperf", source=f"keyed-{seed}", model="m", duration_s=600.0),
                    requests())


def in_process(n: int, out: Path) -> None:
    """Both sides from ``SavedRun`` objects with prompt keys and token ids: the equality path."""
    t0 = time.perf_counter()
    matcher = OutputMatcher()
    sides = Sides([fold_run(keyed(n, 1, 1.0), matcher, "baseline")],
                  [fold_run(keyed(n, 2, 1.03), matcher, "candidate")], matcher)
    j = judge_sides(sides, load_policy("default"))
    write_report(j, out)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    eq = j.equality[0] if j.equality else None
    print(f"in process, keyed outputs: {n} + {n} requests, {wall:.1f} s, peak RSS {peak:.0f} MiB; "
          f"verdict {j.verdict}; equality {eq.summary.counts if eq else None}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--runs-per-side", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/unpaired-speed"))
    ap.add_argument("--keyed", action="store_true", help="in process, with prompt keys and token ids")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.keyed:
        in_process(args.requests, args.dir / "keyed-report")
        return
    k = args.runs_per_side
    files = {side: [args.dir / f"{side}-{i}.json" for i in range(k)] for side in ("baseline", "candidate")}
    t0 = time.perf_counter()
    for i in range(k):
        write_bench(files["baseline"][i], args.requests, 1 + 2 * i, 1.0)
        write_bench(files["candidate"][i], args.requests, 2 + 2 * i, 1.03)
    made = time.perf_counter() - t0
    sources = [f"--{side}={f}" for side, paths in files.items() for f in paths]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "abserve", "compare", *sources,
                           "--out", str(args.dir / "report")], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    size = sum(f.stat().st_size for paths in files.values() for f in paths) / 2**20
    print(f"files: {2 * k} x {args.requests} requests, {size:.0f} MiB together (written in {made:.1f} s)")
    print(f"abserve compare: exit {proc.returncode}, {wall:.1f} s wall, peak RSS {peak_mib:.0f} MiB")
    print(proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else proc.stderr.strip())


if __name__ == "__main__":
    main()
