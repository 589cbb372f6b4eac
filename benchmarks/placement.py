"""Placement bias on the CPU default: do counterbalanced intervals keep their coverage?

Reads finished ``abserve run`` directories (their ``abserve.db``) and, for the time per output
token (and TTFT), prints a Markdown table per run:

- A/A' runs (``configs/aa-placement.yaml``: arms a and a2, the same build, 16 blocks in ABBA
  order): each consecutive ABBA quartet of blocks is one replicate of the balanced design. For
  each replicate: the counterbalanced interval (``abserve.compare.blocked``), the naive pooled
  Hodges-Lehmann interval, and the interval a STATIC placement would have given (only the
  replicate's blocks of one placement). The truth is 0: count how often each interval misses.
- A/B runs (``configs/many-items-placement.yaml``): the counterbalanced interval of b - a over
  the whole run (the linear lookup's cost shows as a negative difference: bisect is faster).

Usage: ``.venv/bin/python -m benchmarks.placement RUN_DIR [RUN_DIR ...] [--pair a a2]``.
The servers are started by ``abserve run`` (under the machine-wide vLLM lock); this script only
reads the stores.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from abserve.compare.blocked import blocked_shift
from abserve.compare.latency import paired_sample, request_latency
from abserve.compare.placement import sample_levels
from abserve.compare.policy import Policy
from abserve.compare.stats.paired import hodges_lehmann
from abserve.compare.warmup import drop_warmup
from abserve.store.latest import latest_run

CONF = 0.95


@dataclass
class Row:
    label: str
    n: int
    blocked: tuple[float, float, float] | None
    bias: float | None
    pooled: tuple[float, float, float]
    static: list[tuple[str, float, float, float]]


def _ms(iv: tuple[float, float, float] | None) -> str:
    if iv is None:
        return "n/a"
    est, lo, hi = (x * 1000 for x in iv)
    return f"{est:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def _miss(iv: tuple[float, float, float] | None) -> bool:
    return iv is not None and not (iv[1] <= 0.0 <= iv[2])


def analyse(diffs: list[float], blocks: list[str | None], levels: list[str | None], label: str) -> Row:
    shift = blocked_shift(diffs, blocks, levels, CONF, 6)
    pooled = hodges_lehmann(diffs, CONF)
    static = []
    for level in dict.fromkeys(lv for lv in levels if lv):
        part = [d for d, lv in zip(diffs, levels, strict=True) if lv == level]
        iv = hodges_lehmann(part, CONF)
        static.append((level, iv.estimate, iv.low, iv.high))
    return Row(label, len(diffs),
               None if shift is None else (shift.estimate, shift.low, shift.high),
               None if shift is None else shift.bias,
               (pooled.estimate, pooled.low, pooled.high), static)


def run_rows(run_dir: Path, left: str, right: str, metric: str, quartets: bool) -> list[Row]:
    stored = latest_run(run_dir / "abserve.db")
    if stored is None:
        raise SystemExit(f"{run_dir}: no run stored")
    exchanges = stored.exchanges
    judged, _ = drop_warmup(exchanges, Policy(warmup_requests=10))
    lat = {ex.request_id: {a: request_latency(o) for a, o in ex.arms.items()} for ex in judged}
    sample = paired_sample(judged, lat, metric, left, right)
    levels = sample_levels(sample, judged, left, right)
    rows = [analyse(sample.diffs, sample.blocks, levels, f"{run_dir.name} (all blocks)")]
    if quartets:
        count = max(int(b) for b in sample.blocks if b is not None) + 1
        for q in range(count // 4):
            keep = [i for i, b in enumerate(sample.blocks) if b is not None and int(b) // 4 == q]
            rows.append(analyse([sample.diffs[i] for i in keep], [sample.blocks[i] for i in keep],
                                [levels[i] for i in keep], f"{run_dir.name} blocks {4 * q}-{4 * q + 3}"))
    return rows


def table(rows: list[Row], title: str) -> str:
    out = [f"#### {title}", "",
           "| replicate | pairs | counterbalanced [95%] | bias | naive pooled [95%] "
           "| static placement [95%] |",
           "|---|---:|---|---:|---|---|"]
    for r in rows:
        static = "<br>".join(f"{lv}: {_ms((e, lo, hi))}" for lv, e, lo, hi in r.static)
        bias = "n/a" if r.bias is None else f"{r.bias * 1000:+.2f}"
        out.append(f"| {r.label} | {r.n} | {_ms(r.blocked)} | {bias} | {_ms(r.pooled)} | {static} |")
    reps = [r for r in rows if "blocks " in r.label] or rows
    statics = [(e, lo, hi) for r in reps for _, e, lo, hi in r.static]
    if reps:
        out += ["", f"Replicates: {len(reps)}; intervals missing 0 (the truth in an A/A' run): "
                f"counterbalanced {sum(_miss(r.blocked) for r in reps)}/{len(reps)}, naive pooled "
                f"{sum(_miss(r.pooled) for r in reps)}/{len(reps)}, static placement "
                f"{sum(_miss(s) for s in statics)}/{len(statics)}.", ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--pair", nargs=2, default=("a", "a2"), metavar=("LEFT", "RIGHT"))
    parser.add_argument("--metrics", default="tpot,ttft")
    parser.add_argument("--quartets", action="store_true", help="one replicate per ABBA quartet")
    args = parser.parse_args()
    left, right = args.pair
    for metric in args.metrics.split(","):
        rows = [row for run in args.runs for row in run_rows(run, left, right, metric, args.quartets)]
        print(table(rows, f"{metric}: {args.pair[1]} - {args.pair[0]} (ms)"))
        if any(r.blocked and not math.isfinite(r.blocked[1]) for r in rows):
            print("(infinite bounds: too few pairs for an interval)")


if __name__ == "__main__":
    main()
