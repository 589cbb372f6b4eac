"""How often the CPU default's anytime tail guards fail identical arms in the by-hand flow, before
and after a tail fail had to clear the policy's ``unknown_placement_bias`` (benchmarks/by_hand_tails.md).

The pairs are real: every judged (a, b) pair of the given by-hand stores (``tests/integration/
test_by_hand_flow.py``'s, kept with ``--basetemp``), the first 11 exchanges left out as the
policy's warm-up does. Each simulated run draws 30 of them (the test's judged count) with the arm
of each pair at random (identical builds: either may be the slow one), optionally slows the
candidate by a factor on every request, and decides the paired tail with the judgment's own
functions (``paired_excess``, ``spread_decision``) with and without the bias. Seeded.

    python -m benchmarks.by_hand_tails sqlite:////tmp/byhand/test_rep_0_0/abserve.db ...
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from abserve.compare.latency import request_latency
from abserve.compare.quantile_cs import paired_excess, spread_decision
from abserve.store import Store

GUARDS = {"ttft": (0.95, 0.1), "tpot": (0.99, 0.0007), "e2e": (0.99, 0.1)}  # p, cpu-default's bias
WARMUP, PAIRS = 11, 30


def real_pairs(urls: Sequence[str], run_id: str) -> dict[str, np.ndarray]:
    """Every judged (a, b) pair of each metric in the stores."""
    pairs: dict[str, list[tuple[float, float]]] = {m: [] for m in GUARDS}
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


def false_fails(pairs: np.ndarray, metric: str, slower: float, runs: int,
                rng: np.random.Generator) -> tuple[int, int]:
    """Fails out of ``runs`` simulated runs, without and with the bias."""
    p, bias = GUARDS[metric]
    before = after = 0
    for _ in range(runs):
        drawn = pairs[rng.integers(0, len(pairs), PAIRS)]
        swap = rng.random(PAIRS) < 0.5
        base = np.where(swap, drawn[:, 1], drawn[:, 0])
        cand = np.where(swap, drawn[:, 0], drawn[:, 1]) * slower
        excess = paired_excess(base, cand, 0.10, 0.0)
        before += spread_decision(excess, p, 0.05) == "fail"
        after += spread_decision(excess - bias, p, 0.05) == "fail"
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("urls", nargs="+", help="by-hand stores (database URLs)")
    parser.add_argument("--run-id", default="by-hand-test")
    parser.add_argument("--runs", type=int, default=4000)
    args = parser.parse_args()
    pairs = real_pairs(args.urls, args.run_id)
    rng = np.random.default_rng(0)
    print("| guard | real pairs | candidate slower by | false fails before | after |")
    print("|---|---:|---:|---:|---:|")
    for slower in (1.0, 1.025):
        for metric, (p, _) in GUARDS.items():
            before, after = false_fails(pairs[metric], metric, slower, args.runs, rng)
            print(f"| {metric}.p{round(p * 100)} | {len(pairs[metric])} | {slower - 1:.1%} | "
                  f"{before}/{args.runs} ({before / args.runs:.2%}) | {after}/{args.runs} |")


if __name__ == "__main__":
    main()
