"""Statistical power: requests needed to detect a latency effect, paired design vs Kayenta's unpaired test.

abserve sends every request to both arms at the same instant and compares per request (Wilcoxon
signed-rank on the paired differences, Hodges-Lehmann interval). Kayenta compares the two arms'
samples unpaired (Mann-Whitney U). Both are applied here to the same stored requests of an A/A'
pair (identical builds: the true effect is zero), with a known effect added to the candidate's
values of one metric (time per output token by default): ``candidate + effect``. For each request
count n, ``--draws`` resamples of n requests (with replacement, each request keeping both arms)
are tested one-sided at level ``alpha`` by both methods; power = share of resamples that detect
the effect. The table gives the smallest n reaching ``--power`` for each effect, and beside it
``abserve.compare.plan.requests_needed`` (the paired planner's analytic answer from the same data).

Why pairing wins: per-request latency varies far more between requests (prompt length, image
count) than between two arms on the same request; the paired difference cancels the first.

    .venv/bin/python -m benchmarks.power --source DB[:BASELINE:CANDIDATE] [--metric tpot]
        [--effects 0.01 0.02 0.05 0.10] [--power 0.8] [--alpha 0.05] [--draws 400]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from scipy import stats

from abserve.compare import load_policy
from abserve.compare.latency import paired_sample, request_latency
from abserve.compare.plan import requests_needed, robust_sigma
from abserve.compare.warmup import drop_warmup
from abserve.store.latest import latest_run

GRID = (6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 125, 150, 200, 250, 300, 400, 500, 700, 1000,
        1500, 2000)


def pairs(source: str, metric: str, policy_path: str) -> tuple[np.ndarray, np.ndarray, str]:
    db, _, arms = source.partition(":")
    baseline, _, candidate = (arms or "a:a2").partition(":")
    stored = latest_run(db)
    if stored is None:
        raise SystemExit(f"{db}: no run stored")
    run, exchanges = stored.run, stored.exchanges
    judged, _ = drop_warmup(exchanges, load_policy(policy_path))
    lat = {ex.request_id: {a: request_latency(o) for a, o in ex.arms.items()} for ex in judged}
    s = paired_sample(judged, lat, metric, baseline, candidate)
    return np.asarray(s.baseline), np.asarray(s.candidate), f"{run.run_id} ({baseline} vs {candidate})"


def detects(base: np.ndarray, cand: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row (one resample each): does the paired signed-rank test, and does the unpaired
    Mann-Whitney test, find ``cand > base`` one-sided at ``alpha``? Normal approximations with
    mid-ranks (the statistics scipy computes for large samples), vectorised over resamples."""
    n = base.shape[1]
    z_crit = stats.norm.ppf(1 - alpha)
    d = cand - base
    ranks = stats.rankdata(np.abs(d), axis=1)
    w_plus = np.where(d > 0, ranks, 0.0).sum(axis=1) + 0.5 * np.where(d == 0, ranks, 0.0).sum(axis=1)
    w_mean, w_sd = n * (n + 1) / 4, np.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    both = stats.rankdata(np.concatenate([cand, base], axis=1), axis=1)
    u = both[:, :n].sum(axis=1) - n * (n + 1) / 2
    u_mean, u_sd = n * n / 2, np.sqrt(n * n * (2 * n + 1) / 12)
    return (w_plus - w_mean) / w_sd > z_crit, (u - u_mean) / u_sd > z_crit


def power_curve(base: np.ndarray, cand: np.ndarray, effect: float, alpha: float, draws: int,
                rng: np.random.Generator, target: float) -> tuple[int | None, int | None]:
    """Smallest n on the grid where each method reaches ``target`` power (None: not on the grid)."""
    found: list[int | None] = [None, None]
    for n in GRID:
        idx = rng.integers(0, len(base), (draws, n))
        paired, unpaired = detects(base[idx], cand[idx] + effect, alpha)
        for m, hits in enumerate((paired, unpaired)):
            if found[m] is None and hits.mean() >= target:
                found[m] = n
        if all(f is not None for f in found):
            break
    return found[0], found[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="DB[:BASELINE:CANDIDATE] of an A/A' run")
    parser.add_argument("--metric", default="tpot")
    parser.add_argument("--policy", default="configs/policy/selftest.yaml", help="for warm-up only")
    parser.add_argument("--effects", type=float, nargs="+", default=[0.01, 0.02, 0.05, 0.10],
                        help="effects relative to the baseline median")
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    base, raw, label = pairs(args.source, args.metric, args.policy)
    shift = float(np.median(raw - base))
    cand = raw - shift  # identical builds: remove what the pair differed by, so the only effect is ours
    median = float(np.median(base))
    sd_between = float(np.std(base, ddof=1))
    sigma_paired = robust_sigma(cand - base)
    print(f"source {label}: {len(base)} pairs of {args.metric}; baseline median {median * 1e3:.2f} ms, "
          f"between-request SD {sd_between * 1e3:.2f} ms, paired-difference robust SD "
          f"{sigma_paired * 1e3:.2f} ms; observed A/A' shift {shift * 1e3:+.2f} ms removed; "
          f"one-sided alpha {args.alpha}, power {args.power}, "
          f"{args.draws} resamples per n\n")
    print("| effect | effect (ms) | paired (Wilcoxon) n | unpaired (Mann-Whitney, Kayenta) n | "
          "unpaired / paired | paired planner n (abserve plan) |")
    print("|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(args.seed)
    for rel in args.effects:
        effect = rel * median
        paired_n, unpaired_n = power_curve(base, cand, effect, args.alpha, args.draws, rng, args.power)
        planned = requests_needed(sigma_paired, effect, 1 - 2 * args.alpha, args.power)
        ratio = f"{unpaired_n / paired_n:.1f}x" if paired_n and unpaired_n else (
            f"> {GRID[-1] / paired_n:.0f}x" if paired_n else "-")
        print(f"| {rel:.0%} | {effect * 1e3:.2f} | {paired_n or f'> {GRID[-1]}'} | "
              f"{unpaired_n or f'> {GRID[-1]}'} | {ratio} | {planned} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
