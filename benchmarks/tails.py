"""Tail guards by simulation (issue 58): what stall the CPU default's guards fail within its
budget, and how often identical builds fail, for the net share of slowed requests
(``compare.slowed_share``) against the paired quantile sequence it replaced (``quantile_cs``).

Synthetic paired runs shaped like the CPU default's traffic on the shared core: TTFT lognormal
around 0.6 s (sd 0.5 in log: long prompts, a few images, hundreds of images), 24 output tokens at
~25 ms per token (lognormal sd 0.15), paired noise Student t3 (TTFT 10 ms, 0.35 ms per token);
``e2e = ttft + 23 tpot``. A stall of ``size`` seconds hits a ``share`` of the candidate's requests
at random, in its decode steps (``tpot += size / 23``) or its prefill (``ttft += size``), and end to
end either way. The three guards of ``configs/policy/cpu-default.yaml`` (``ttft.p95``, ``tpot.p99``,
``e2e.p99``, each 10% per request) are judged after every round of 6 pairs up to ``--pairs``
(the CPU default's 500 s budget judges about 135 on this machine: 78 in 289 s in issue 58's run),
each the way ``compare.quantile_cs.tail_line`` judges it, a fail spread over both halves of the
run (``spread_decision``'s rule). A run fails when any guard fails. A/A: the same without a stall,
on the default's traffic and on short requests (TTFT 55 ms with 5 ms noise, 12 tokens: the
by-hand flow's, where the allowance is inside the noise).

``python -m benchmarks.tails [--runs N] [--pairs N] [--sizes 0.1,0.3] [--shares 0.05] [--no-aa]``;
results in benchmarks/tails.md.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from abserve.compare.quantile_cs import paired_excess, spread_decision
from abserve.compare.slowed_share import share_decision, slowed_signs

ALPHA, ROUND, RELATIVE = 0.05, 6, 0.10
GUARDS = {"ttft": 0.95, "tpot": 0.99, "e2e": 0.99}  # metric -> quantile (allowed share 1 - p)
STOP_AT = [0]  # --stop-at: pairs at which the shift gates have decided (0: the run never stops early)
HOWS = ["share", "quantile"]  # the designs compared (--share-only: the net share alone)


@dataclass(frozen=True)
class Shape:
    ttft: float = 0.6
    ttft_sd: float = 0.5
    ttft_noise: float = 0.010
    tpot: float = 0.025
    tpot_noise: float = 0.00035
    tokens: int = 24


SHORT = Shape(ttft=0.055, ttft_sd=0.1, ttft_noise=0.005, tpot=0.020, tpot_noise=0.0007, tokens=12)


def t3(rng: np.random.Generator, sd: float, size: tuple[int, ...]) -> np.ndarray:
    return sd / math.sqrt(3) * rng.standard_t(3, size=size)  # Student t3 scaled to ``sd``


def paired_run(rng: np.random.Generator, n: int, shape: Shape, share: float = 0.0, size: float = 0.0,
               where: str = "decode") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    ttft = shape.ttft * rng.lognormal(0.0, shape.ttft_sd, n)
    tpot = shape.tpot * rng.lognormal(0.0, 0.15, n)
    gaps = shape.tokens - 1
    arms = []
    for _ in range(2):
        arms.append((ttft + t3(rng, shape.ttft_noise, (n,)), tpot + t3(rng, shape.tpot_noise, (n,))))
    hit = rng.random(n) < share
    (tb, pb), (tc, pc) = arms
    if where == "decode":
        pc = pc + np.where(hit, size / gaps, 0.0)
    else:
        tc = tc + np.where(hit, size, 0.0)
    return {"ttft": (tb, tc), "tpot": (pb, pc), "e2e": (tb + gaps * pb, tc + gaps * pc)}


def spread(slowed: np.ndarray) -> bool:
    half = len(slowed) // 2
    first, second = int(slowed[:half].sum()), int(slowed[half:].sum())
    return 4 * min(first, second) >= first + second


def share_fail(b: np.ndarray, c: np.ndarray, p: float, looks: list[int]) -> int | None:
    """The first look the net-share guard fails (spread over both halves), or None."""
    signs = slowed_signs(b, c, RELATIVE, 0.0)
    for n in looks:
        if n >= 20 and share_decision(signs[:n], [k for k in looks if k <= n], 1 - p, ALPHA) == "fail" \
                and spread(signs[:n] > 0):
            return n
    return None


def quantile_fail(b: np.ndarray, c: np.ndarray, p: float, looks: list[int]) -> int | None:
    """The first look the paired quantile guard (before issue 58) fails, or None."""
    excess = paired_excess(b, c, RELATIVE, 0.0)
    return next((n for n in looks if n >= 20 and spread_decision(excess[:n], p, ALPHA) == "fail"), None)


def guilty_looks(run: dict[str, tuple[np.ndarray, np.ndarray]], looks: list[int]) -> list[bool]:
    """Per look: whether any guard looks guilty (its net share beyond its allowed share)."""
    shares = [np.cumsum(slowed_signs(*run[m], RELATIVE, 0.0)) for m in GUARDS]
    return [any(s[n - 1] / n > 1 - p for s, p in zip(shares, GUARDS.values(), strict=True)) for n in looks]


def first_fail(run: dict[str, tuple[np.ndarray, np.ndarray]], looks: list[int], how: str) -> int | None:
    """The first look a guard fails; with ``STOP_AT`` set, None when the run stopped before it: at
    the first look from ``STOP_AT`` pairs on (the shift gates decided) where no guard looks guilty."""
    judge = share_fail if how == "share" else quantile_fail
    firsts = [judge(*run[m], p, looks) for m, p in GUARDS.items()]
    got = [n for n in firsts if n is not None]
    fail = min(got) if got else None
    if STOP_AT[0] and how == "share":
        stop = next((n for n, guilty in zip(looks, guilty_looks(run, looks), strict=True)
                     if n >= STOP_AT[0] and not guilty), None)
        if stop is not None and (fail is None or stop < fail):
            return None
    return fail


def cell(rng: np.random.Generator, runs: int, pairs: int, shape: Shape, **stall: object) -> str:
    """Both designs on the same ``runs`` runs: failed runs (median pairs to the fail) each."""
    looks = list(range(ROUND, pairs + 1, ROUND))
    seeds = [int(s) for s in rng.integers(1 << 31, size=runs)]
    out = []
    for how in HOWS:
        firsts = [first_fail(paired_run(np.random.default_rng(seed), pairs, shape, **stall),  # type: ignore[arg-type]
                             looks, how) for seed in seeds]
        got = [n for n in firsts if n is not None]
        median = int(np.median(got)) if got else "-"
        out.append(f"{len(got)}/{runs} ({median})")
    return " | ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=135)
    parser.add_argument("--sizes", default="0.05,0.1,0.3", help="stall sizes (s), comma-separated")
    parser.add_argument("--shares", default="0.02,0.05,0.10", help="stalled shares, comma-separated")
    parser.add_argument("--no-aa", action="store_true", help="leave out the A/A rows")
    parser.add_argument("--guards", default="ttft=0.95,tpot=0.99,e2e=0.99",
                        help="metric=quantile of each guard (allowed share 1 - quantile)")
    parser.add_argument("--share-only", action="store_true", help="only the net share design")
    parser.add_argument("--stop-at", type=int, default=0,
                        help="pairs at which the shift gates decide: from there a run stops at the first "
                             "look where no guard looks guilty (issue 58's rule); 0: never early")
    args = parser.parse_args()
    STOP_AT[0] = args.stop_at
    GUARDS.clear()
    GUARDS.update({m: float(q) for m, q in (g.split("=") for g in args.guards.split(","))})
    if args.share_only:
        HOWS[:] = ["share"]
    sizes = [float(x) for x in args.sizes.split(",")]
    shares = [float(x) for x in args.shares.split(",")]
    rng = np.random.default_rng(58)
    print("| case | net share: failed (median pairs) | paired quantile (before) |")
    print("|---|---:|---:|")
    for name, shape in (("A/A, the default's traffic", Shape()), ("A/A, short requests", SHORT)):
        if not args.no_aa:
            print(f"| {name} | {cell(rng, args.runs, args.pairs, shape)} |")
    for where in ("decode", "prefill"):
        for size in sizes:
            for share in shares:
                print(f"| {size * 1000:.0f} ms stall in {where} on {share:.0%} | "
                      f"{cell(rng, args.runs, args.pairs, Shape(), share=share, size=size, where=where)} |",
                      flush=True)


if __name__ == "__main__":
    main()
