"""Strata and tail gates by simulation: family-wise false fails at every look, requests to decision.

Three questions (issue 32), answered on synthetic paired runs shaped like abserve's traffic
(three strata of different size, level and noise; heavy-tailed noise: Student t with 3 degrees
of freedom, lognormal request sizes), judged with the gates' own functions
(``compare.anytime.anytime_ols`` + ``compare.sequential.winsorize`` for each stratum's shift,
``compare.quantile_cs.spread_decision`` for the tail: a fail must hold in each half of the
run), one look per round of 6 requests:

1. **Strata, family-wise false fail.** Every stratum's true shift sits exactly AT its allowance
   (the hardest null: any fail is false); each stratum's sequence runs at alpha / m. The share of
   runs with a fail in ANY stratum by look k, for every k.
2. **Tail, false fail.** Exactly 5% of requests are slowed beyond their allowance (the p95
   gate's boundary); the share of runs the p95 gate failed by look k.
3. **Requests to decision** against the aggregate-only design: a regression of 15% on the
   stratum that is 27% of the traffic, and a stall of 300 ms on a quarter of the requests.
4. **Stalls after the first token** (``--stalls``, issue 47): what share and size of a stall in
   the decode steps the CPU default's ``tpot.p99`` guard fails within a budget of judged pairs,
   on the CPU default's shape (24 output tokens, ~14 ms per token, paired noise 0.35 ms sd,
   Student t3), and its false fails at its boundary (exactly 1% of requests slowed beyond 10%).

``python -m benchmarks.strata [--runs N]``, ``python -m benchmarks.strata --stalls [--runs N]``;
results in benchmarks/strata.md.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abserve.compare.quantile_cs import paired_excess, spread_decision
from abserve.compare.sequential import winsorize
from abserve.compare.stats.anytime import anytime_ols

ALPHA = 0.05
ROUND = 6
SHARES = (0.27, 0.23, 0.50)  # stratum shares of the traffic
LEVELS = (1.2, 0.4, 0.6)  # baseline TTFT level per stratum (s)
NOISE = (0.012, 0.006, 0.008)  # paired noise scale per stratum (s)


@dataclass(frozen=True)
class Run:
    stratum: np.ndarray
    base: np.ndarray
    cand: np.ndarray


def make_run(rng: np.random.Generator, n: int, shifts: tuple[float, ...] = (0.0, 0.0, 0.0),
             stall_share: float = 0.0, stall: float = 0.3) -> Run:
    """``n`` paired requests; ``shifts``: the candidate's relative slowdown per stratum."""
    stratum = rng.choice(3, size=n, p=SHARES)
    size = rng.lognormal(0.0, 0.4, size=n)
    base = np.array(LEVELS)[stratum] * size
    noise = np.array(NOISE)[stratum] * rng.standard_t(3, size=(2, n))
    cand = base * (1 + np.array(shifts)[stratum]) + noise[1]
    base = base + noise[0]
    cand = cand + np.where(rng.random(n) < stall_share, stall, 0.0)
    return Run(stratum, base, cand)


def shift_interval(diffs: np.ndarray, alpha: float) -> tuple[float, float]:
    """The stratum gate's interval at one look: winsorized, intercept-only anytime OLS."""
    y, _ = winsorize(diffs, 5.0)
    fit = anytime_ols(y, np.ones((len(y), 1)), alpha) if len(y) >= 4 else None
    if fit is None:
        return -math.inf, math.inf
    iv = fit.coefficients[0]
    return iv.low, iv.high


def strata_decisions(run: Run, allowed: float, alpha: float, looks: list[int]) -> list[str]:
    """Per look: ``fail`` when any stratum's interval is wholly beyond its allowance."""
    out = []
    m = 3
    for n in looks:
        state = "open"
        for s in range(m):
            pick = run.stratum[:n] == s
            if pick.sum() < 20:
                continue
            base = run.base[:n][pick]
            threshold = allowed * float(np.median(base))
            low, _ = shift_interval(run.cand[:n][pick] - base, alpha / m)
            if low > threshold:
                state = "fail"
                break
        out.append(state)
    return out


def aggregate_decision(run: Run, allowed: float, alpha: float, n: int) -> str:
    threshold = allowed * float(np.median(run.base[:n]))
    low, high = shift_interval(run.cand[:n] - run.base[:n], alpha)
    return "fail" if low > threshold else "pass" if high <= threshold else "open"


def tail_decisions(run: Run, allowed: float, alpha: float, looks: list[int]) -> list[str]:
    excess = paired_excess(run.base, run.cand, allowed, 0.0)
    return [spread_decision(excess[:n], 0.95, alpha) if n >= 20 else "open" for n in looks]


def boundary_tail_run(rng: np.random.Generator, n: int, allowed: float) -> Run:
    """Exactly 5% of requests slowed beyond ``allowed`` (the p95 gate's null boundary)."""
    run = make_run(rng, n)
    hit = rng.random(n) < 0.05
    cand = np.where(hit, run.base * (1 + allowed) + 0.05 + np.abs(run.cand - run.base),
                    np.minimum(run.cand, run.base * (1 + allowed) * 0.999))
    return Run(run.stratum, run.base, cand)


def cumulative(rows: list[list[str]]) -> np.ndarray:
    fails = np.array([[d == "fail" for d in r] for r in rows])
    return np.maximum.accumulate(fails, axis=1).mean(axis=0)


def first(decisions: list[str], looks: list[int], what: str) -> int | None:
    return next((n for n, d in zip(looks, decisions, strict=True) if d == what), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--stalls", action="store_true", help="the decode-stall grid (issue 47) only")
    args = parser.parse_args()
    if args.stalls:
        stall_grid(np.random.default_rng(47), args.runs, args.requests)
        return
    rng = np.random.default_rng(32)
    looks = list(range(ROUND, args.requests + 1, ROUND))
    allowed = 0.05
    boundary = [strata_decisions(make_run(rng, args.requests, (allowed,) * 3), allowed, ALPHA, looks)
                for _ in range(args.runs)]
    fw = cumulative(boundary)
    print(f"strata at the allowance, {args.runs} runs: family-wise false fail by look "
          f"(max over looks {fw.max():.3f}, alpha {ALPHA}):")
    print("  " + ", ".join(f"n={n}: {v:.3f}" for n, v in zip(looks, fw, strict=True) if n % 60 == 0))
    tails = [tail_decisions(boundary_tail_run(rng, args.requests, 0.10), 0.10, ALPHA, looks)
             for _ in range(args.runs)]
    tw = cumulative(tails)
    print(f"p95 tail at its boundary: false fail by look (max {tw.max():.3f}):")
    print("  " + ", ".join(f"n={n}: {v:.3f}" for n, v in zip(looks, tw, strict=True) if n % 60 == 0))
    compare_designs(rng, args.runs // 4, looks, allowed)


def compare_designs(rng: np.random.Generator, runs: int, looks: list[int], allowed: float) -> None:
    """Requests to decision: strata + tail gates against the aggregate-only design."""
    cases = {"15% slower on the 27% stratum": {"shifts": (0.15, 0.0, 0.0)},
             "300 ms stall on 25% of requests": {"stall_share": 0.25}}
    for name, kw in cases.items():
        strata_n, tail_n, agg = [], [], []
        for _ in range(runs):
            run = make_run(rng, looks[-1], **kw)  # type: ignore[arg-type]
            strata_n.append(first(strata_decisions(run, allowed, ALPHA, looks), looks, "fail"))
            tail_n.append(first(tail_decisions(run, 0.10, ALPHA, looks), looks, "fail"))
            agg.append(aggregate_first(run, allowed, looks))
        print(f"{name}: " + summary("strata fail", strata_n) + "; " + summary("p95 tail fail", tail_n)
              + "; aggregate-only: " + ", ".join(f"{d} {sum(1 for _, x in agg if x == d)}/{runs}"
                                                 for d in ("pass", "fail", "open"))
              + f" (median n {_median([n for n, _ in agg])})")


def aggregate_first(run: Run, allowed: float, looks: list[int]) -> tuple[int | None, str]:
    """The aggregate-only design's first decision and its look."""
    for n in looks:
        decision = aggregate_decision(run, allowed, ALPHA, n)
        if decision != "open":
            return n, decision
    return None, "open"


def summary(what: str, ns: list[int | None]) -> str:
    got = [n for n in ns if n is not None]
    return f"{what} {len(got)}/{len(ns)} (median n {_median(got)})"


def _median(xs: Sequence[int | None]) -> str:
    vals = [x for x in xs if x is not None]
    return "-" if not vals else f"{int(np.median(vals))}"


GAPS = 23  # the CPU default's 24 output tokens
TPOT, TPOT_NOISE = 0.014, 0.00035  # time per output token on the shared core, paired noise sd (s)


def tpot_run(rng: np.random.Generator, n: int, share: float, stall: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` paired times per output token; the candidate stalls ``stall`` seconds once in the
    decode steps of a ``share`` of requests (spread over its 23 gaps)."""
    base = TPOT * rng.lognormal(0.0, 0.1, size=n)
    noise = TPOT_NOISE / math.sqrt(3) * rng.standard_t(3, size=(2, n))  # t3 scaled to sd 0.35 ms
    cand = base + noise[1] + np.where(rng.random(n) < share, stall / GAPS, 0.0)
    return base + noise[0], cand


def p99_first_fail(base: np.ndarray, cand: np.ndarray, looks: list[int]) -> int | None:
    excess = paired_excess(base, cand, 0.10, 0.0)
    return next((n for n in looks if n >= 20 and spread_decision(excess[:n], 0.99, ALPHA) == "fail"), None)


def stall_grid(rng: np.random.Generator, runs: int, requests: int) -> None:
    """Share of runs whose ``tpot.p99`` guard failed within ``requests`` judged pairs, and the
    median pairs to the fail, per stall share and size; then false fails at the boundary."""
    looks = list(range(ROUND, requests + 1, ROUND))
    for stall in (0.025, 0.05, 0.1, 0.3):
        cells = []
        for share in (0.02, 0.04, 0.08, 0.125, 0.25):
            firsts = [p99_first_fail(*tpot_run(rng, requests, share, stall), looks) for _ in range(runs)]
            got = [n for n in firsts if n is not None]
            cells.append(f"{share:.1%}: {len(got)}/{runs} (median {_median(got)})")
        print(f"stall {stall * 1000:.0f} ms after the first token: " + "; ".join(cells))
    false = 0
    for _ in range(runs):
        base, cand = tpot_run(rng, requests, 0.0, 0.0)
        hit = rng.random(requests) < 0.01  # exactly at the boundary: 1% slowed beyond 10%
        cand = np.where(hit, base * 1.1 + 0.002, np.minimum(cand, base * 1.1 * 0.999))
        false += p99_first_fail(base, cand, looks) is not None
    print(f"tpot.p99 at its boundary (1% slowed beyond 10%): false fail {false}/{runs} by {requests} pairs")


if __name__ == "__main__":
    main()
