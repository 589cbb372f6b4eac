"""Replaying a Mooncake-style trace: the generator's lateness at 50 requests/s, memory vs length.

Writes two synthetic traces (10,000 and 100,000 lines, one line every 20 ms: 50 requests/s;
the first block one of 64 shared "system prompts", then 1-5 blocks of the line's own, block
size 512, hash ids numbered in order of first use as Mooncake's are). For each: the whole-file
check a run does before sending (``check_file``) in a fresh process (time and peak RSS), and a
replay (``run_load``, ``replay: recorded``, one Locust process, 16 users) of the schedule's first
``--seconds`` against the fast fake upstream (no model; in this process), reading the timing
records' ``lateness_s`` and the Locust process's peak RSS. Usage:
``.venv/bin/python -m benchmarks.trace_replay [--seconds 60]``; results by hand in
``benchmarks/trace_replay.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

GAP_MS = 20  # 50 requests/s
SYSTEM_PROMPTS = 64
BLOCK = 512


def write_trace(path: Path, lines: int, seed: int = 7) -> None:
    """A Mooncake-like trace: shared first blocks, own blocks after, ids in order of first use."""
    rng = random.Random(seed)
    next_id, prompts = 0, {}
    with path.open("wb") as fh:
        for k in range(lines):
            system = rng.randrange(SYSTEM_PROMPTS)
            if system not in prompts:
                prompts[system], next_id = next_id, next_id + 1
            own = rng.randint(1, 5)
            ids = [prompts[system], *range(next_id, next_id + own)]
            next_id += own
            n_in = own * BLOCK + rng.randint(1, BLOCK)
            fh.write(orjson.dumps({"timestamp": k * GAP_MS, "input_length": n_in,
                                   "output_length": 16, "hash_ids": ids}) + b"\n")


def child(args: argparse.Namespace) -> None:
    """In a fresh process: the check, or the replay; prints one JSON line."""
    from abserve.traffic.sources import FileSource, check_file

    src = FileSource(path=Path(args.trace), model="tiny-llava", max_context=8192)
    if args.child == "check":
        t0 = time.perf_counter()
        check = check_file(src)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out: dict[str, Any] = {"requests": check.requests, "check_s": time.perf_counter() - t0,
                               "check_cpu_s": usage.ru_utime + usage.ru_stime}
    else:
        from abserve.traffic.runner import LoadSpec, run_load
        from abserve.traffic.timing import read_timings

        n = int(args.seconds * 1000 / GAP_MS)
        with Path(args.trace).open("rb") as fh:
            total = sum(1 for _ in fh)
        summary = run_load(LoadSpec(src.label, args.url, requests=n, users=16, run_id="trace-bench",
                                    out_dir=Path(args.out), timeout_s=args.seconds + 120,
                                    source=src.model_copy(update={"checked": total})))
        late = sorted(r.lateness_s or 0.0 for r in read_timings([summary.timings_path]))
        out = {"sent": summary.requests_sent, "failures": summary.failures,
               "late_p50_ms": 1000 * statistics.median(late),
               "late_p99_ms": 1000 * late[int(0.99 * (len(late) - 1))],
               "late_max_ms": 1000 * late[-1],
               "locust_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
    out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def run_child(kind: str, trace: Path, **extra: object) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.trace_replay", "--child", kind, "--trace", str(trace)]
    for key, value in extra.items():
        argv += [f"--{key}", str(value)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--child", choices=["check", "replay"])
    parser.add_argument("--trace")
    parser.add_argument("--url")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from tests.support.fake_upstream import FakeUpstream, Knobs

    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| lines | file MiB | check s (CPU s) | check peak RSS MiB | replay s | sent (failed) | "
          "lateness p50 / p99 / max ms | Locust peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp, FakeUpstream(Knobs(n_tokens=16)) as up:
        for lines in (10_000, 100_000):
            trace = Path(tmp) / f"trace-{lines}.jsonl"
            write_trace(trace, lines)
            check = run_child("check", trace)
            replay = run_child("replay", trace, seconds=args.seconds, url=up.url,
                               out=Path(tmp) / f"out-{lines}")
            up.observed.bodies.clear()
            print(f"| {lines:,} | {trace.stat().st_size / 2**20:.1f} | "
                  f"{check['check_s']:.1f} ({check['check_cpu_s']:.1f}) | "
                  f"{check['rss_mib']:.0f} | {args.seconds:.0f} | {replay['sent']} "
                  f"({replay['failures']}) | {replay['late_p50_ms']:.2f} / "
                  f"{replay['late_p99_ms']:.2f} / {replay['late_max_ms']:.1f} | "
                  f"{replay['locust_rss_mib']:.0f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
