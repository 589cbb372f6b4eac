"""The judgment of ``abserve compare``: two sides of saved runs, judged unpaired, as a ``Judgment``.

The latency gates are the policy's own (``metrics``), each judged by
``abserve.compare.unpaired`` (runs as clusters, or one run per side: no pass); equality is the
outputs matched by prompt across sides (``abserve.saved.matching``), judged like a paired run's
without an A/A' floor; a side whose error rate passes the policy's ``max_error_rate`` makes the
comparison invalid. The ``Judgment``'s ``unpaired`` facts carry what the first screen must say:
this is weaker than a paired run, and the run-to-run spread it stood on. Pure over ``Sides``.
"""

from __future__ import annotations

import time

import numpy as np

from abserve.compare.equality import CLASSES, PairResult, SideAtDivergence
from abserve.compare.model import (
    PERCENTILES,
    ArmSummary,
    ClassCounts,
    EqualityLine,
    EqualityVerdict,
    JudgedProvenance,
    Judgment,
    MetricLine,
    UnpairedFacts,
)
from abserve.compare.policy import Policy
from abserve.compare.stats.paired import clopper_pearson
from abserve.compare.unpaired import UnpairedShift, measured_spread, unpaired_line
from abserve.compare.verdict import equality_verdict, overall
from abserve.saved.collect import METRICS, RunData, Sides
from abserve.saved.matching import OutputMatcher

SIDES = ("baseline", "candidate")
PAIRED_COMMAND = "abserve run CONFIG with the baseline build as arm a and the candidate as arm b"


def arm_summary(side: str, runs: list[RunData]) -> ArmSummary:
    """One side as an arm of the report: requests, errors, throughput, latency percentiles."""
    requests = sum(r.requests for r in runs)
    errors: dict[str, int] = {}
    for r in runs:
        for kind, n in r.errors.items():
            errors[kind] = errors.get(kind, 0) + n
    failed = sum(errors.values())
    duration = sum(r.header.duration_s or 0.0 for r in runs)
    tokens = sum(r.output_tokens for r in runs)
    dists = {}
    for metric in METRICS:
        values = [r.values[metric] for r in runs if metric in r.values and r.values[metric].size]
        if values:
            dists[metric] = [float(v) for v in np.quantile(np.concatenate(values), PERCENTILES)]
    return ArmSummary(
        name=side, role=side, requests=requests, errors=errors,
        error_rate=failed / requests if requests else 0.0,
        requests_per_s=(requests - failed) / duration if duration else 0.0,
        tokens_per_s=tokens / duration if duration else 0.0, distributions=dists,
        proof_detail="saved runs: " + ", ".join(r.header.source for r in runs))


def equality_lines(m: OutputMatcher, policy: Policy) -> tuple[list[EqualityLine], EqualityVerdict | None]:
    """The matched outputs as an equality line and its verdict (none when nothing matched)."""
    if not m.comparable:
        return [], None
    k, n = m.counts["divergent"], m.comparable
    rate = clopper_pearson(k, n, policy.confidence)
    unit = "/".join(sorted(m.units))
    line = EqualityLine(
        left="baseline", right="candidate",
        summary=ClassCounts(total=n, counts={c: m.counts[c] for c in CLASSES}, mismatches=k), comparable=n,
        rate=k / n, low=rate.low, high=rate.high,
        left_problems=dict(m.problems["baseline"]) | ({"asked by no candidate": m.unasked()}
                                                      if m.unasked() else {}),
        right_problems=dict(m.problems["candidate"]),
        by_position={str(p): c for p, c in sorted(m.by_position.items())},
        examples=[PairResult(request_id=f"prompt {d.prompt_key[:12]} ({d.candidate_source})", left="baseline",
                             right="candidate", cls="divergent", position=d.position,
                             left_side=SideAtDivergence(token=d.baseline or None),
                             right_side=SideAtDivergence(token=d.candidate or None))
                  for d in m.examples],
    )
    verdict = equality_verdict(k, n, None, policy)
    verdict.reason = f"{verdict.reason} (matched by prompt, compared by {unit}; unpaired: no A/A' floor)"
    return [line], verdict


def _facts(sides: Sides, policy: Policy, shifts: dict[str, UnpairedShift]) -> UnpairedFacts:
    headers = [r.header for r in sides.baseline + sides.candidate]
    clustered = min(len(sides.baseline), len(sides.candidate)) >= 2
    ratios: dict[str, float] = {}
    for name, s in shifts.items():
        if s.spread is not None and s.spread.ratio is not None and min(s.runs) >= 2:
            ratios.setdefault(name.split(".")[0], s.spread.ratio)
    measured = {name: v for name, s in shifts.items() if (v := measured_spread(s)) is not None}
    m = sides.matcher
    unmatched = {f"{side}: {kind}": n for side in SIDES for kind, n in m.problems[side].items()}
    if m.unasked():
        unmatched["baseline: asked by no candidate"] = m.unasked()
    return UnpairedFacts(
        baseline_sources=[r.header.source for r in sides.baseline],
        candidate_sources=[r.header.source for r in sides.candidate],
        tools=sorted({h.tool for h in headers}), model=next((h.model for h in headers if h.model), None),
        design="clustered" if clustered else "single-run", assumed_spread=policy.saved.run_to_run_spread,
        measured_spread=measured, spread_ratio=ratios, equality_note=m.not_measured(),
        equality_compared="/".join(sorted(m.units)),
        unmatched=unmatched, paired_command=PAIRED_COMMAND)


def invalid_reasons(sides: Sides, policy: Policy) -> list[str]:
    """A side that failed too many requests, or has no successful one, cannot be judged."""
    reasons = []
    for side in SIDES:
        runs = sides.runs(side)
        total, failed = sum(r.requests for r in runs), sum(r.failed for r in runs)
        if failed == total:
            reasons.append(f"the {side} side has no successful request ({total} recorded)")
        elif failed / total > policy.max_error_rate:
            reasons.append(f"the {side} side failed {failed}/{total} requests ({failed / total:.1%}), "
                           f"above {policy.max_error_rate:.1%}")
    return reasons


def judge_sides(sides: Sides, policy: Policy, run_id: str | None = None) -> Judgment:
    """Judge the candidate side against the baseline side under ``policy``."""
    invalid = invalid_reasons(sides, policy)
    lines: list[MetricLine] = []
    shifts: dict[str, UnpairedShift] = {}
    for rule in policy.metrics:
        line, shift = unpaired_line(rule, sides.metric_runs("baseline", rule.metric),
                                    sides.metric_runs("candidate", rule.metric), policy)
        lines.append(line)
        if shift is not None:
            shifts[rule.name] = shift
    equality, eq_verdict = equality_lines(sides.matcher, policy)
    rows = [(m.name, m.critical, m.outcome, m.reason) for m in lines]
    if eq_verdict is not None:
        rows.append(("equality", eq_verdict.critical, eq_verdict.outcome, eq_verdict.reason))
    verdict, code, reasons = overall(invalid, rows)
    facts = _facts(sides, policy, shifts)
    if verdict == "pass" and facts.design == "single-run":
        verdict, code = "inconclusive", 2
        reasons = ["one run per side: no pass (run-to-run noise cannot be told from a change)"]
    headers = [r.header for r in sides.baseline + sides.candidate]
    started = min((h.started_at for h in headers if h.started_at is not None), default=time.time())
    total = sum(r.requests for r in sides.baseline + sides.candidate)
    return Judgment(
        run_id=run_id or time.strftime("compare-%Y%m%d-%H%M%S", time.gmtime()), run_status="completed",
        started_at=started, verdict=verdict, exit_code=code, reasons=reasons, invalid_reasons=invalid,
        # placement: the unpaired statement says the runs ran apart; the paired runs' placement
        # warning (and its unknown_placement_bias) does not apply to these gates
        exchanges_total=total, exchanges_judged=total, placement_known=True,
        warmup_detail="saved runs: nothing cut (the tools' own warm-up, if any, was theirs)",
        arms={side: arm_summary(side, sides.runs(side)) for side in SIDES},
        equality=equality, equality_verdict=eq_verdict, metrics=lines,
        provenance=JudgedProvenance(
            kind="unpaired", command="abserve compare", policy_name=policy.name,
            policy_sha256=policy.digest(),
            sources={side: [r.header.source for r in sides.runs(side)] for side in SIDES}),
        policy=policy.model_dump(mode="json"), unpaired=facts)
