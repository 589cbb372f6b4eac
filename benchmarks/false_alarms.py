"""False alarms: how often the judgment fails an A/A' pair (same build twice), replayed from records.

A comparison service that cries wolf is ignored. Each source is a stored run with two arms
running identical code (``a`` and ``a2``); every judgment here treats one as the baseline and the
other as the candidate (no floor), under a policy, exactly as ``abserve report`` would:

- the whole run, once;
- disjoint windows of ``--size`` consecutive judged exchanges (independent replicates in time);
- ``--draws`` random subsamples of about ``--size`` exchanges (in start order; from a run in
  counterbalanced blocks the same share of every block and at least the 6 pairs per block the
  counterbalanced estimate needs, so the design survives), which show how
  often a run of that size would fail under the same conditions.

Warm-up is dropped from the whole run first (the policy's ``warmup_requests``), then each window
or subsample is judged without further warm-up. Counted per judgment: the verdict (``fail`` is the
false alarm the policy's confidence bounds: a latency line fails only when its whole interval
lies beyond the allowed change, which for identical builds happens at most ``(1-confidence)/2`` of
the time when nothing but noise differs) and, stricter, whether any critical latency interval
excluded zero in the bad direction (the plain one-sided test at level ``(1-confidence)/2``, no
allowance), and whether the equality line failed. A run whose arms sit on different cores carries
a placement bias that no number of requests removes: such a run shows it here as a raised
"interval excludes 0" rate, which is what the allowance (and counterbalancing) is for.

    .venv/bin/python -m benchmarks.false_alarms --source DB[:BASELINE:CANDIDATE] ... \
        [--policy configs/policy/selftest.yaml] [--size 40] [--draws 200]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from dataclasses import dataclass, field

from abserve.compare import Judgment, Policy, judge, load_policy
from abserve.compare.policy import ArmRoles
from abserve.compare.warmup import drop_warmup
from abserve.model.records import Exchange, RunInfo
from abserve.store.latest import latest_run

BLOCK_MIN_PAIRS = 6  # abserve.compare.blocked leaves out blocks with fewer pairs


@dataclass
class Tally:
    """Outcomes of many judgments of one source."""

    judgments: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    excludes_zero: int = 0  # some critical latency interval entirely on the bad side of 0
    equality_fail: int = 0

    def add(self, j: Judgment) -> None:
        self.judgments += 1
        self.verdicts[j.verdict] += 1
        bad = [m for m in j.metrics if m.critical and m.low is not None and m.high is not None
               and ((m.direction == "increase" and m.low > 0) or (m.direction == "decrease" and m.high < 0)
                    or (m.direction == "either" and (m.low > 0 or m.high < 0)))]
        self.excludes_zero += bool(bad)
        self.equality_fail += j.equality_verdict is not None and j.equality_verdict.outcome == "fail"

    def rate(self, n: int) -> str:
        return f"{n}/{self.judgments} ({n / self.judgments:.1%})" if self.judgments else "-"


def load(source: str) -> tuple[RunInfo, list[Exchange], str, str]:
    db, _, arms = source.partition(":")
    baseline, _, candidate = (arms or "a:a2").partition(":")
    stored = latest_run(db)
    if stored is None:
        raise SystemExit(f"{db}: no run stored")
    return stored.run, stored.exchanges, baseline, candidate


def replay(run: RunInfo, exchanges: list[Exchange], policy: Policy, size: int, draws: int,
           seed: int) -> tuple[Judgment, Tally, Tally]:
    """The whole-run judgment, then tallies over disjoint windows and random subsamples."""
    whole = judge(run, exchanges, policy)
    judged, _ = drop_warmup(exchanges, policy)
    bare = policy.model_copy(update={"warmup_requests": 0, "warmup_seconds": 0.0})
    windows, subsamples = Tally(), Tally()
    for start in range(0, len(judged) - size + 1, size):
        windows.add(judge(run, judged[start:start + size], bare))
    rng = random.Random(seed)
    for _ in range(draws if len(judged) > size else 0):
        subsamples.add(judge(run, subsample(judged, size, rng), bare))
    return whole, windows, subsamples


def subsample(judged: list[Exchange], size: int, rng: random.Random) -> list[Exchange]:
    """About ``size`` exchanges in start order; from a run in blocks, the same share of every
    block, so the subsample keeps the run's counterbalanced design."""
    blocks: dict[str | None, list[int]] = {}
    for i, ex in enumerate(judged):
        blocks.setdefault(ex.tags.get("block"), []).append(i)
    share = size / len(judged)
    keep = BLOCK_MIN_PAIRS if len(blocks) > 1 else 1
    picked = [i for members in blocks.values()
              for i in rng.sample(members, min(len(members), max(keep, round(share * len(members)))))]
    return [judged[i] for i in sorted(picked)]


def line(j: Judgment, name: str) -> str:
    m = next((m for m in j.metrics if m.name == name), None)
    if m is None or m.estimate is None:
        return "n/a"
    return (f"{m.estimate * 1e3:+.2f} ms [{(m.low or 0) * 1e3:+.2f}, {(m.high or 0) * 1e3:+.2f}] "
            f"vs allowed {(m.threshold or 0) * 1e3:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", action="append", required=True, help="DB[:BASELINE:CANDIDATE]")
    parser.add_argument("--policy", default="configs/policy/selftest.yaml")
    parser.add_argument("--size", type=int, default=40)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    base_policy = load_policy(args.policy)
    alpha = (1 - base_policy.confidence) / 2
    print(f"policy `{args.policy}` (confidence {base_policy.confidence}: a latency line fails only when "
          f"its whole interval is beyond the allowance; nominal level {alpha:.3f} per one-sided interval); "
          f"windows and subsamples of {args.size} judged exchanges, {args.draws} subsamples\n")
    print("| source | arms | judged | whole run: verdict | tpot.hl | ttft.hl | windows: fail | "
          "windows: excl. 0 | subsamples: fail | subsamples: excl. 0 | subsamples: equality fail | "
          "subsample verdicts |")
    print("|---|---|---:|---|---|---|---|---|---|---|---|---|")
    total = Tally()
    for source in args.source:
        run, exchanges, baseline, candidate = load(source)
        policy = base_policy.model_copy(
            update={"arms": ArmRoles(baseline=baseline, candidate=candidate, floor=None)})
        whole, windows, subs = replay(run, exchanges, policy, args.size, args.draws, args.seed)
        for t in (windows, subs):
            total.judgments += t.judgments
            total.verdicts.update(t.verdicts)
            total.excludes_zero += t.excludes_zero
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(subs.verdicts.items()))
        print(f"| {run.run_id} | {baseline} vs {candidate} | {whole.exchanges_judged} | {whole.verdict} | "
              f"{line(whole, 'tpot.hl')} | {line(whole, 'ttft.hl')} | "
              f"{windows.rate(windows.verdicts['fail'])} | {windows.rate(windows.excludes_zero)} | "
              f"{subs.rate(subs.verdicts['fail'])} | "
              f"{subs.rate(subs.excludes_zero)} | {subs.rate(subs.equality_fail)} | {verdicts} |")
    print(f"\nall windows and subsamples: false-fail {total.rate(total.verdicts['fail'])}, "
          f"any critical interval excluding 0 {total.rate(total.excludes_zero)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
