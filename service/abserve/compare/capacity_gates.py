"""The capacity gates and the finding the report shows, from a capacity stage's record.

``judge_capacity`` reads what ``abserve.runs.capacity_stage`` stored in the run's provenance
(``capacity``: the rules, the arms, every step's per-request rows, why the stage stopped) and
judges it again from those rows, so ``abserve report`` gives the same answer as the run did
(the bootstrap is seeded). ``capacity.goodput`` compares the knees, ``capacity.throughput`` the
output tokens/s where both arms were saturated; ``gate_rows`` gives them to ``verdict.overall``
as every other gate. Pure functions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from abserve.compare.capacity import (
    CapacityFinding,
    CapacityGate,
    CapacityRules,
    Knee,
    Replicates,
    StepRecord,
    StepSummary,
    arm_step_stats,
    knee_of,
    looks_alpha,
    merged_steps,
    order_stat,
    ratio_outcome,
)
from abserve.compare.model import Outcome


def judge_capacity(record: dict[str, Any]) -> CapacityFinding:
    """The finding of a stored capacity record (``runs.capacity_stage.CapacityRun.record``)."""
    rules = CapacityRules.model_validate(record["rules"])
    base, cand = str(record["baseline"]), str(record["candidate"])
    steps = merged_steps([StepRecord.model_validate(s) for s in record.get("steps", [])])
    finding = CapacityFinding(baseline=base, candidate=cand, slo=rules.slo.describe(),
                              attainment_target=rules.attainment, confidence=rules.confidence,
                              stop_reason=str(record.get("stop_reason", "")))
    if not steps:
        finding.gates = [_open(name, rule.critical, finding.stop_reason or "no rate step was measured")
                         for name, rule in (("capacity.goodput", rules.goodput),
                                            ("capacity.throughput", rules.throughput))]
        return finding
    alpha = looks_alpha(rules.confidence, int(record.get("looks", len(steps))))
    finding.steps = [StepSummary(index=s.index, rate=s.rate, window_s=s.window_s,
                                 lateness_p95_s=s.lateness_p95_s,
                                 arms={a: arm_step_stats(s.arms[a], s.window_s, rules.attainment,
                                                         rules.confidence) for a in (base, cand)})
                     for s in steps]
    reps = Replicates(steps, (base, cand), rules.attainment, rules.bootstrap, seed=int(record.get("seed", 0)))
    finding.knees = {a: knee_of(a, steps, [st.arms[a] for st in finding.steps], reps, rules.attainment, alpha)
                     for a in (base, cand)}
    finding.gates = [goodput_gate(finding.knees[base], finding.knees[cand], reps, base, cand, rules, alpha),
                     throughput_gate(finding, reps, base, cand, rules, alpha)]
    finding.sentence = sentence(finding)
    return finding


def _open(name: str, critical: bool, reason: str) -> CapacityGate:
    return CapacityGate(name=name, critical=critical, outcome="inconclusive", reason=reason)


def goodput_gate(kb: Knee, kc: Knee, reps: Replicates, base: str, cand: str, rules: CapacityRules,
                 alpha: float) -> CapacityGate:
    """The candidate's knee against the baseline's (relative), from the paired replicates."""
    rule = rules.goodput
    if kb.held_to is None:
        return _open("capacity.goodput", rule.critical, f"no knee to compare: baseline {kb.note}")
    hb, fb = reps.brackets(base)
    hc, fc = reps.brackets(cand)
    with np.errstate(divide="ignore", invalid="ignore"):
        lows = np.where(np.isinf(fb), 0.0, hc / fb)
        highs = np.where(hb > 0, fc / np.where(hb > 0, hb, 1.0), math.inf)
    low, high = order_stat(lows, alpha / 2) - 1, order_stat(highs, 1 - alpha / 2) - 1
    if kb.estimate is not None and kc.estimate is not None:
        outcome, reason = ratio_outcome(kc.estimate / kb.estimate - 1, low, high, rule.allowed_relative)
        return CapacityGate(name="capacity.goodput", critical=rule.critical, outcome=outcome,
                            reason=reason, estimate=kc.estimate / kb.estimate - 1, low=low, high=high,
                            allowed_relative=rule.allowed_relative)
    notes = "; ".join(f"{k.arm}: {k.note}" for k in (kb, kc) if k.note)
    bounded: Outcome = "pass" if low >= -rule.allowed_relative else (
        "fail" if high < -rule.allowed_relative else "inconclusive")
    span = f"[{low:+.1%}, {'unbounded' if math.isinf(high) else f'{high:+.1%}'}]"
    return CapacityGate(name="capacity.goodput", critical=rule.critical, outcome=bounded,
                        reason=f"knee ratio within {span} ({notes}); "
                               f"allowed loss {rule.allowed_relative:.0%}",
                        low=low, high=None if math.isinf(high) else high,
                        allowed_relative=rule.allowed_relative)


def throughput_gate(finding: CapacityFinding, reps: Replicates, base: str, cand: str,
                    rules: CapacityRules, alpha: float) -> CapacityGate:
    """Output tokens/s at the highest step where neither arm held (both saturated)."""
    rule = rules.throughput
    saturated = [j for j, s in enumerate(finding.steps) if not any(a.holds for a in s.arms.values())]
    if not saturated:
        return _open("capacity.throughput", rule.critical,
                     "no step saturated both arms (one held at every rate tested)")
    j = saturated[-1]
    step = finding.steps[j]
    tb, tc = step.arms[base].tokens_per_s, step.arms[cand].tokens_per_s
    if tb <= 0:
        return _open("capacity.throughput", rule.critical,
                     f"the baseline finished nothing at {step.rate:.3g}/s")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = reps.tokens[cand][:, j] / reps.tokens[base][:, j]
    ratios = np.where(np.isfinite(ratios), ratios, math.inf)
    low, high = order_stat(ratios, alpha / 2) - 1, order_stat(ratios, 1 - alpha / 2) - 1
    estimate = tc / tb - 1
    outcome, reason = ratio_outcome(estimate, low, high, rule.allowed_relative)
    return CapacityGate(name="capacity.throughput", critical=rule.critical, outcome=outcome,
                        reason=f"{tc:.1f} against {tb:.1f} output tokens/s at {step.rate:.3g}/s "
                               f"offered: {reason}",
                        estimate=estimate, low=low, high=None if math.isinf(high) else high,
                        allowed_relative=rule.allowed_relative)


def _rate(knee: Knee) -> str:
    if knee.estimate is not None:
        return f"{knee.estimate:.2f}"
    if knee.held_to is None:
        return f"less than {knee.broke_at:.2f}" if knee.broke_at else "none"
    return f"at least {knee.held_to:.2f}"


def sentence(finding: CapacityFinding) -> str:
    """The first screen's sentence on capacity."""
    kb, kc = finding.knees[finding.baseline], finding.knees[finding.candidate]
    gate = finding.gates[0]
    change = ""
    if gate.estimate is not None:
        span = f"[{gate.low:+.0%}, {'unbounded' if gate.high is None else f'{gate.high:+.0%}'}]"
        change = f": {gate.estimate:+.0%} {span}"
    return (f"The candidate carries {_rate(kc)} requests/s within the SLO ({finding.slo}, "
            f"{finding.attainment_target:.0%} of requests) against {_rate(kb)} for the baseline"
            f"{change}; capacity.goodput {gate.outcome.upper()}.")


def gate_rows(finding: CapacityFinding) -> list[tuple[str, bool, Outcome, str]]:
    """The gates as ``verdict.overall`` takes them."""
    return [(g.name, g.critical, g.outcome, g.reason) for g in finding.gates]
