"""Capacity gate by simulation (issue 59): how precisely the knee is located for a given budget,
and how often identical builds fail ``capacity.goodput``.

``abserve.compare.capacity_sim`` runs the real rate search (``capacity_search.next_rate``) and the
real judgment (``capacity_gates.judge_capacity``) on two first-come first-served servers fed the
same Poisson arrivals (gamma service times, cv 0.35, the same draws for both arms, as paired as
the real stage). Per budget (``max_steps`` steps of ``step_s`` seconds) it reports, over ``--runs``
seeds: how often the baseline's knee was bracketed, the median relative width of its interval
(high / low - 1), and the goodput gate's outcomes for a candidate with ``--loss`` less capacity
(a fail is the right answer) and for an identical candidate (A/A': a fail is a false fail).

``python -m benchmarks.capacity [--runs N] [--mu 3] [--loss 0.3] [--allowed 0.15]``; results in
benchmarks/capacity.md.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from abserve.compare.capacity_search import CapacityConfig
from abserve.compare.capacity_sim import simulate_stage


def config(steps: int, step_s: float, allowed: float, mu: float) -> CapacityConfig:
    """The CPU capacity config's shape, rates scaled to a server of capacity ``mu``/s."""
    return CapacityConfig.model_validate({
        "slo": {"e2e_s": 6.0 / mu}, "attainment": 0.9, "goodput": {"allowed_relative": allowed},
        "start_rate": round(mu / 3, 3), "growth": 1.5, "resolution": 0.1, "max_steps": steps,
        "step_s": step_s, "warmup_s": step_s / 8, "drain_s": max(10.0, 6.0 / mu), "bootstrap": 200})


def row(steps: int, step_s: float, args: argparse.Namespace) -> str:
    cap = config(steps, step_s, args.allowed, args.mu)
    widths, bracketed, outcomes, aa = [], 0, Counter[str](), Counter[str]()
    for seed in range(args.runs):
        finding, _ = simulate_stage(cap, args.mu, args.mu * (1 - args.loss), seed=seed)
        knee = finding.knees["a"]
        if knee.estimate is not None and knee.low and knee.high:
            bracketed += 1
            widths.append(knee.high / knee.low - 1)
        outcomes[finding.gates[0].outcome] += 1
        same, _ = simulate_stage(cap, args.mu, args.mu, seed=10_000 + seed)
        aa[same.gates[0].outcome] += 1
    width = f"{np.median(widths):.0%}" if widths else "—"
    seconds = steps * cap.step_cost_s
    return (f"| {steps} x {step_s:.0f} s (~{seconds / 60:.0f} min) | {bracketed}/{args.runs} | {width} | "
            f"{outcomes['fail']}/{args.runs} | {dict(outcomes)} | {aa['fail']}/{args.runs} | {dict(aa)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--mu", type=float, default=3.0, help="the baseline's capacity, requests/s")
    parser.add_argument("--loss", type=float, default=0.3, help="the candidate's relative loss")
    parser.add_argument("--allowed", type=float, default=0.15)
    args = parser.parse_args()
    print(f"baseline capacity {args.mu}/s, candidate {1 - args.loss:.0%} of it, allowed loss "
          f"{args.allowed:.0%}, {args.runs} seeds per row\n")
    print("| budget | baseline knee bracketed | median interval width | loss: fail | loss: outcomes "
          "| A/A': false fail | A/A': outcomes |")
    print("|---|---|---|---|---|---|---|")
    for steps, step_s in ((6, 40.0), (8, 40.0), (8, 80.0), (12, 80.0)):
        print(row(steps, step_s, args), flush=True)


if __name__ == "__main__":
    main()
