"""How often the CPU default's anytime tail guards fail identical arms in the by-hand flow, before
and after a tail fail had to clear the policy's ``unknown_placement_bias`` (benchmarks/by_hand_tails.md).

The pairs are real: every judged (a, b) pair of the given by-hand stores (``tests/integration/
test_by_hand_flow.py``'s, kept with ``--basetemp``), the first 11 exchanges left out as the
policy's warm-up does. Each simulated run draws 30 of them (the test's judged count) with the arm
of each pair at random (identical builds: either may be the slow one), optionally slows the
candidate by a factor on every request, and decides the paired tail with the judgment's own
functions (``paired_excess``, ``spread_decision``) with and without the bias; the guards, their
allowances and the biases are the policy's (``--policy``, the CPU default's). Seeded.

    python -m benchmarks.by_hand_tails sqlite:////tmp/byhand/test_rep_0_0/abserve.db ...
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from abserve.compare.latency import request_latency
from abserve.compare.policy import MetricRule, Policy, load_policy
from abserve.compare.quantile_cs import paired_excess, spread_decision
from abserve.store import Store

POLICY = Path(__file__).resolve().parents[1] / "configs" / "policy" / "cpu-default.yaml"
WARMUP, PAIRS = 11, 30


def tail_guards(policy: Policy) -> list[MetricRule]:
    """The policy's percentile rules (the anytime tail guards of ``sequential.tails: anytime``)."""
    return [rule for rule in policy.metrics if rule.statistic.startswith("p")]


def real_pairs(urls: Sequence[str], run_id: str, metrics: Sequence[str]) -> dict[str, np.ndarray]:
    """Every judged (a, b) pair of each metric in the stores."""
    pairs: dict[str, list[tuple[float, float]]] = {m: [] for m in metrics}
    for url in urls:
        with Store.open(url) as store:
            exchanges = list(store.iter_exchanges(run_id))[WARMUP:]
        for x in exchanges:
            la, lb = request_latency(x.arms["a"]), request_latency(x.arms["b"])
            for metric, found in pairs.items():
                a, b = (getattr(la, metric), getattr(lb, metric)) if la and lb else (None, None)
                if a is not None and b is not None:
                    found.append((a, b))
    return {m: np.asarray(found) for m, found in pairs.items()}


def false_fails(pairs: np.ndarray, rule: MetricRule, bias: float, slower: float, runs: int,
                rng: np.random.Generator) -> tuple[int, int]:
    """Fails out of ``runs`` simulated runs, without and with the bias."""
    p = int(rule.statistic[1:]) / 100
    before = after = 0
    for _ in range(runs):
        drawn = pairs[rng.integers(0, len(pairs), PAIRS)]
        swap = rng.random(PAIRS) < 0.5
        base = np.where(swap, drawn[:, 1], drawn[:, 0])
        cand = np.where(swap, drawn[:, 0], drawn[:, 1]) * slower
        excess = paired_excess(base, cand, rule.allowed_relative, rule.allowed_absolute)
        before += spread_decision(excess, p, 0.05) == "fail"
        after += spread_decision(excess - bias, p, 0.05) == "fail"
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("urls", nargs="+", help="by-hand stores (database URLs)")
    parser.add_argument("--run-id", default="by-hand-test")
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--policy", type=Path, default=POLICY, help="its tail rules and biases")
    args = parser.parse_args()
    policy = load_policy(args.policy)
    guards, biases = tail_guards(policy), policy.sequential.unknown_placement_bias
    pairs = real_pairs(args.urls, args.run_id, [rule.metric for rule in guards])
    rng = np.random.default_rng(0)
    print("| guard | real pairs | candidate slower by | false fails before | after |")
    print("|---|---:|---:|---:|---:|")
    for slower in (1.0, 1.025):
        for rule in guards:
            found = pairs[rule.metric]
            before, after = false_fails(found, rule, biases.get(rule.metric, 0.0), slower, args.runs, rng)
            print(f"| {rule.metric}.{rule.statistic} | {len(found)} | {slower - 1:.1%} | "
                  f"{before}/{args.runs} ({before / args.runs:.2%}) | {after}/{args.runs} |")


if __name__ == "__main__":
    main()
