"""Decisive verdicts: how sequential runs ended, and what monitoring costs in false alarms.

Two measurements, both from stored records (seconds; no server is started):

``runs DIR ...``: each ``abserve run`` output directory's verdict, why it stopped, requests and
seconds to the decision (from the run's ``sequential`` provenance), as a Markdown table and the
distribution over runs.

``replay DB ... --policy FILE``: A/A' false alarms under continuous monitoring. The judged pairs
of the stores' A/A' runs (two arms, same build) are pooled; each replay draws a sequence of
``--pairs`` of them with replacement and looks after every ``--every`` pairs, as a sequential run
would. Counted per replay and critical latency gate: whether the anytime-valid interval
(``abserve.compare.sequential``, intersected over looks) ever lay wholly beyond the allowance
(a false fail), and, beside it, whether a fixed-sample interval (Hodges-Lehmann / Wilcoxon,
the judgment's fixed design) re-checked at every look ever did (the peeking inflation), and
whether it did at the last look only (one fixed-size look). Stricter, the same three for
"the interval excludes 0" (the plain test of any difference, no allowance): how often each
method would cry wolf about identical builds. Also: how many replays decided
``pass`` and at how many pairs, and at how many pairs a fail was first proven (for a mutant's
records, e.g. the slow one, that is the time to detection; "false fail" is then the power).

    .venv/bin/python -m benchmarks.decisive runs runs/dec-*/
    .venv/bin/python -m benchmarks.decisive replay runs/aa-*/abserve.db \
        --policy configs/policy/aa-default.yaml [--arms a:a2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from abserve.compare import Policy, load_policy
from abserve.compare.judge import select_judged
from abserve.compare.latency import paired_sample, request_latency
from abserve.compare.policy import ArmRoles
from abserve.compare.sequential import Design, coefficient_path
from abserve.compare.stats.paired import hodges_lehmann
from abserve.compare.verdict import threshold_for
from abserve.store.latest import latest_run


def run_rows(dirs: Sequence[Path]) -> list[dict[str, object]]:
    """One row per run directory: verdict, stop reason, requests and seconds to decision."""
    rows = []
    for d in dirs:
        report = json.loads((d / "report.json").read_text())
        seq = report["provenance"].get("sequential") or {}
        looks = seq.get("looks") or [{}]
        rows.append({"run": d.name, "verdict": report["verdict"], "decided": seq.get("decided"),
                     "rounds": seq.get("rounds"), "requests": seq.get("requests"),
                     "seconds": round(float(looks[-1].get("seconds", 0.0))),
                     "stop": seq.get("stop_reason", "")})
    return rows


def print_runs(rows: list[dict[str, object]]) -> None:
    print("| run | verdict | decided | rounds | requests | s to decision | stop reason |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['run']} | {r['verdict']} | {r['decided']} | {r['rounds']} | {r['requests']} | "
              f"{r['seconds']} | {r['stop']} |")
    decisive = [r for r in rows if r["verdict"] in ("pass", "fail")]
    print(f"\n{len(decisive)}/{len(rows)} decisive (pass or fail).")
    for key in ("requests", "seconds"):
        values = [float(str(r[key])) for r in rows if r[key] is not None]
        if values:
            print(f"- {key} to decision: median {statistics.median(values):.0f}, "
                  f"min {min(values):.0f}, max {max(values):.0f}")


def aa_pairs(db: str, policy: Policy, metric: str) -> tuple[list[float], float]:
    """The judged pairs' differences of ``metric`` and the baseline median of one A/A' store."""
    stored = latest_run(db)
    if stored is None:
        raise SystemExit(f"{db}: no run stored")
    ordered = sorted(stored.exchanges, key=lambda ex: (ex.started_at, ex.request_id))
    lat = {ex.request_id: {a: request_latency(o) for a, o in ex.arms.items()} for ex in ordered}
    judged, _ = select_judged(ordered, lat, policy)
    sample = paired_sample(judged, lat, metric, policy.arms.baseline, policy.arms.candidate)
    return sample.diffs, float(np.median(sample.baseline))


def replay(diffs: np.ndarray, threshold: float, policy: Policy, pairs: int, every: int,
           rng: np.random.Generator) -> dict[str, object]:
    """One monitored replay: did the anytime / peeking / single-look interval fail; when it passed."""
    draw = rng.choice(diffs, size=pairs, replace=True)
    looks = list(range(every, pairs + 1, every))
    design = Design(list(draw), [None] * pairs, [None] * pairs, [float(i) for i in range(pairs)], looks)
    path = coefficient_path(design, "shift", 1 - policy.confidence, policy.sequential.phi)
    anytime_fail = any(lk.low is not None and lk.low > threshold for lk in path)
    failed_at = next((lk.n for lk in path if lk.low is not None and lk.low > threshold), None)
    passed_at = next((lk.n for lk in path if lk.high is not None and lk.high <= threshold), None)
    fixed = [hodges_lehmann(list(draw[:n]), policy.confidence) for n in looks]
    return {"anytime_fail": anytime_fail, "peeking_fail": any(iv.low > threshold for iv in fixed),
            "single_fail": fixed[-1].low > threshold, "passed_at": passed_at, "failed_at": failed_at,
            "anytime_excl0": any(_excludes_zero(lk.low, lk.high) for lk in path),
            "peeking_excl0": any(_excludes_zero(iv.low, iv.high) for iv in fixed),
            "single_excl0": _excludes_zero(fixed[-1].low, fixed[-1].high)}


def _excludes_zero(low: float | None, high: float | None) -> bool:
    return (low is not None and low > 0) or (high is not None and high < 0)


def print_replays(dbs: Sequence[str], policy: Policy, replays: int, pairs: int, every: int,
                  seed: int) -> None:
    rng = np.random.default_rng(seed)
    print(f"| gate | A/A' pairs pooled | replays | anytime: false fail | fixed re-checked every {every}: "
          f"false fail | fixed, one look at {pairs}: false fail | anytime: passed | pairs to pass (median) | "
          f"pairs to fail (median) | excludes 0 at some look: anytime / fixed re-checked / one look |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for rule in (r for r in policy.metrics if r.critical and r.statistic == "hl"):
        parts = [aa_pairs(db, policy, rule.metric) for db in dbs]
        diffs = np.array([d for p, _ in parts for d in p])
        threshold = threshold_for(rule, float(np.median([m for _, m in parts])))
        results = [replay(diffs, threshold, policy, pairs, every, rng) for _ in range(replays)]
        passed = [int(str(r["passed_at"])) for r in results if r["passed_at"] is not None]
        failed = [int(str(r["failed_at"])) for r in results if r["failed_at"] is not None]
        keys = ("anytime_fail", "peeking_fail", "single_fail",
                "anytime_excl0", "peeking_excl0", "single_excl0")
        rate = {k: sum(bool(r[k]) for r in results) / replays for k in keys}
        print(f"| {rule.name} (allowed {threshold * 1000:.3f} ms) | {len(diffs)} | {replays} | "
              f"{rate['anytime_fail']:.1%} | {rate['peeking_fail']:.1%} | {rate['single_fail']:.1%} | "
              f"{len(passed) / replays:.1%} | {statistics.median(passed) if passed else '-'} | "
              f"{statistics.median(failed) if failed else '-'} | {rate['anytime_excl0']:.1%} / "
              f"{rate['peeking_excl0']:.1%} / {rate['single_excl0']:.1%} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    runs = sub.add_parser("runs")
    runs.add_argument("dirs", nargs="+", type=Path)
    rep = sub.add_parser("replay")
    rep.add_argument("dbs", nargs="+")
    rep.add_argument("--policy", default="configs/policy/aa-default.yaml")
    rep.add_argument("--replays", type=int, default=400)
    rep.add_argument("--pairs", type=int, default=120)
    rep.add_argument("--every", type=int, default=6)
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--arms", default=None, help="BASELINE:CANDIDATE (default: the policy's)")
    args = parser.parse_args(argv)
    if args.command == "runs":
        print_runs(run_rows(args.dirs))
    else:
        policy = load_policy(args.policy)
        if args.arms:
            baseline, candidate = args.arms.split(":")
            roles = ArmRoles(baseline=baseline, candidate=candidate, floor=None)
            policy = policy.model_copy(update={"arms": roles})
        print_replays(args.dbs, policy, args.replays, args.pairs, args.every, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
