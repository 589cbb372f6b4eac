"""Latency gates of unpaired runs: a candidate side set against a baseline side, runs as clusters.

Each side is one or more saved runs (``abserve compare``); a gate's statistic is a shift of the
distributions (``hl``: the two-sample Hodges-Lehmann shift) or a quantile difference (``p50``,
``p95``, ``p99``). Requests of one run share that run's day, machine state and server start, so
two runs of one build differ by more than their requests' scatter says (the public record: 11-12%
in mean TTFT between two runs of one vLLM branch). Hence:

- **Runs as clusters** (two or more runs on each side): each run gives one
  value of the statistic (``hl``: the run's own shift against the pooled baseline, so every run
  is measured on one scale; a quantile: the run's quantile). The estimate is the difference of
  the sides' mean run values; its interval is Student's t with the runs' pooled between-run
  variance (one spread for both builds, ``df = runs - 2``), never narrower than the within-run
  error alone. The between-run sd over the mean within-run standard error is the ratio the first
  screen shows (1: runs agree as their requests predict; GuideLLM measured 1.8-3.2).
- **One run on a side** (1 against 1, or 1 against repeats): the within-run interval
  (Mann-Whitney for the shift, order statistics for quantiles) of the pooled requests, widened on
  each side by the run-to-run spread: the policy's ``saved.run_to_run_spread`` times the baseline
  value, or, where the other side has repeats, the spread measured there (``z * sqrt(2)`` times
  the between-run sd: the same unit). Nothing passes (one run cannot separate a change from
  run-to-run noise): the line is ``fail`` when even the widened interval lies beyond the
  allowance, else ``inconclusive`` with how many runs per side would decide (from that spread).

Pure; ``candidate - baseline`` (positive = slower), seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import stats as sps

from abserve.base.units import ms
from abserve.compare.gate_line import finite, gate_line
from abserve.compare.model import MetricLine
from abserve.compare.policy import MetricRule, Policy
from abserve.compare.stats.interval import Interval
from abserve.compare.stats.two_sample import (
    Array,
    hl_shift,
    quantile_difference,
    quantile_interval,
    standard_error,
    thinned,
)
from abserve.compare.verdict import latency_outcome, threshold_for

QUANTILE = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
MAX_RUNS = 50  # advice beyond this many runs per side says "more than 50"
Design = Literal["clustered", "single-run"]


@dataclass(frozen=True)
class RunSpread:
    """How much one statistic moves between runs of one build, against its within-run error."""

    between_sd: float  # pooled sd of the per-run statistic across runs of a side (seconds)
    within_se: float  # root mean square within-run standard error of that statistic (seconds)
    df: int  # degrees of freedom of between_sd (runs - sides)

    @property
    def ratio(self) -> float | None:
        """Run-to-run over within-run spread (None when the within-run error is zero/unknown)."""
        if self.within_se <= 0 or not math.isfinite(self.within_se):
            return None
        return self.between_sd / self.within_se


@dataclass(frozen=True)
class UnpairedShift:
    """One statistic's unpaired difference, its interval and how the interval was made."""

    statistic: str
    design: Design
    estimate: float
    low: float
    high: float
    baseline_value: float
    candidate_value: float
    runs: tuple[int, int]  # baseline runs, candidate runs
    requests: tuple[int, int]
    confidence: float
    spread: RunSpread | None = None  # measured (clustered design)
    margin: float = 0.0  # seconds added on each side for run-to-run noise (single-run design)
    run_sd: float = 0.0  # sd of one run's statistic, measured or assumed (seconds)


def _pooled_value(values: Array, statistic: str) -> float:
    return float(np.quantile(values, QUANTILE.get(statistic, 0.5)))


def _within(sample: Array, statistic: str, reference: Array, confidence: float) -> Interval:
    """One run's value of ``statistic`` and its within-run interval (``hl``: against ``reference``)."""
    if statistic == "hl":
        return hl_shift(reference, sample, confidence)
    return quantile_interval(np.sort(sample), QUANTILE[statistic], confidence)


def _difference(base: Array, cand: Array, statistic: str, confidence: float) -> Interval:
    if statistic == "hl":
        return hl_shift(base, cand, confidence)
    return quantile_difference(base, cand, QUANTILE[statistic], confidence)


def t_quantile(df: int, confidence: float) -> float:
    """Student's two-sided critical value at ``confidence``."""
    return float(sps.t.ppf(0.5 + confidence / 2, df))


def runs_needed(gap: float, run_sd: float, confidence: float) -> int | None:
    """The fewest runs per side whose clustered interval (half-width ``t * run_sd * sqrt(2/k)``)
    would be narrower than ``gap`` (the distance from the estimate to the allowance); None when
    more than ``MAX_RUNS``."""
    if run_sd <= 0:
        return 2
    for k in range(2, MAX_RUNS + 1):
        if t_quantile(2 * k - 2, confidence) * run_sd * math.sqrt(2 / k) < gap:
            return k
    return None


def assumed_run_sd(spread: float, baseline_value: float, confidence: float) -> float:
    """The sd of one run's statistic that a relative run-to-run spread (a bound on the
    difference of two runs at ``confidence``) implies: ``spread * |value| / (z * sqrt 2)``."""
    return spread * abs(baseline_value) / (float(sps.norm.ppf(0.5 + confidence / 2)) * math.sqrt(2))


def _clusters(base_runs: Sequence[Array], cand_runs: Sequence[Array], statistic: str,
              confidence: float) -> tuple[list[Array], RunSpread]:
    """Each run's value of ``statistic`` per side, and the between-run spread pooled over the
    sides (a side of one run adds no degree of freedom)."""
    reference = thinned(np.sort(np.concatenate(base_runs)))
    per_run = [[_within(r, statistic, reference, confidence) for r in side]
               for side in (base_runs, cand_runs)]
    values = [np.array([i.estimate for i in side]) for side in per_run]
    ses = np.array([standard_error(i) for side in per_run for i in side])
    df = len(base_runs) + len(cand_runs) - 2
    between = math.sqrt(sum(float(((v - v.mean()) ** 2).sum()) for v in values) / df)
    return values, RunSpread(between, math.sqrt(float(np.mean(ses ** 2))), df)


def unpaired_shift(base_runs: Sequence[Array], cand_runs: Sequence[Array], statistic: str,
                   confidence: float, assumed_spread: float) -> UnpairedShift:
    """``statistic`` of the candidate side minus the baseline side (each a list of runs'
    non-empty value arrays), with its interval under the design the run counts allow."""
    base_all, cand_all = np.concatenate(base_runs), np.concatenate(cand_runs)
    base_value, cand_value = _pooled_value(base_all, statistic), _pooled_value(cand_all, statistic)
    kb, kc = len(base_runs), len(cand_runs)
    facts = UnpairedShift(statistic, "single-run", 0.0, -math.inf, math.inf, base_value, cand_value,
                          (kb, kc), (base_all.size, cand_all.size), confidence)
    spread = _clusters(base_runs, cand_runs, statistic, confidence) if kb + kc >= 3 else None
    if min(kb, kc) == 1:  # one run on a side: the within-run interval widened by the spread
        within = _difference(base_all, cand_all, statistic, confidence)
        if spread is None:  # assumed (the policy's), else measured on the side with repeats
            run_sd = assumed_run_sd(assumed_spread, base_value, confidence)
        else:
            run_sd = spread[1].between_sd
        margin = float(sps.norm.ppf(0.5 + confidence / 2)) * math.sqrt(2) * run_sd
        return replace(facts, estimate=within.estimate, low=within.low - margin, high=within.high + margin,
                       margin=margin, run_sd=run_sd, spread=None if spread is None else spread[1])
    assert spread is not None
    values, runs = spread
    sd = max(runs.between_sd, runs.within_se)
    half = t_quantile(runs.df, confidence) * sd * math.sqrt(1 / kb + 1 / kc)
    estimate = float(values[1].mean() - values[0].mean())
    return replace(facts, design="clustered", estimate=estimate, low=estimate - half, high=estimate + half,
                   spread=runs, run_sd=sd)


def measured_spread(shift: UnpairedShift) -> float | None:
    """The relative run-to-run spread a shift measured (a side with repeats), in the unit of the policy's
    ``saved.run_to_run_spread`` (a bound on two runs' difference at the confidence)."""
    if shift.spread is None or shift.baseline_value == 0:
        return None
    z = float(sps.norm.ppf(0.5 + shift.confidence / 2))
    return z * math.sqrt(2) * shift.spread.between_sd / abs(shift.baseline_value)


def _advice(shift: UnpairedShift, threshold: float) -> str:
    gap = abs(abs(shift.estimate) - threshold) if shift.estimate != 0 else threshold
    k = runs_needed(gap, shift.run_sd, shift.confidence)
    return (f"about {k} runs per side would decide" if k is not None
            else f"more than {MAX_RUNS} runs per side would be needed (the estimate sits on the allowance)")


def judge_unpaired(rule: MetricRule, shift: UnpairedShift, policy: Policy) -> MetricLine:
    """The gate's line: the shift against ``rule``'s allowance, no pass with one run per side."""
    line = gate_line(rule, min(shift.requests), policy)
    threshold = threshold_for(rule, shift.baseline_value)
    outcome, reason = latency_outcome(rule, shift.estimate, shift.low, shift.high, threshold)
    reason = reason.removesuffix("; more requests needed")  # more runs, not requests: _advice says
    runs = f"{shift.runs[0]} baseline and {shift.runs[1]} candidate runs"
    if shift.design == "single-run":
        pct = shift.margin / abs(shift.baseline_value) if shift.baseline_value else 0.0
        how = "assumed by the policy" if shift.spread is None else "measured on the side with repeats"
        widened = (f"interval widened by ±{ms(shift.margin, signed=False)} ({pct:.0%} of the baseline) "
                   f"for run-to-run noise ({how})")
        if outcome == "fail":
            reason = f"{runs}; {widened}: {reason}, beyond the allowance plus the run-to-run spread"
        else:
            outcome = "inconclusive"
            reason = (f"{runs}: one run on a side cannot separate a change from run-to-run noise; "
                      f"{widened}: {reason.split(':')[0]}; {_advice(shift, threshold)}")
    else:
        assert shift.spread is not None
        ratio = shift.spread.ratio
        said = "" if ratio is None else f", run-to-run {ratio:.1f}x the within-run error"
        reason = f"{runs} as clusters (t, df {shift.spread.df}{said}): {reason}"
        if outcome in ("inconclusive", "marginal"):
            reason += f"; {_advice(shift, threshold)}"
    line.method = "unpaired"
    line.baseline_value, line.candidate_value = shift.baseline_value, shift.candidate_value
    line.estimate = shift.estimate
    line.relative = shift.estimate / shift.baseline_value if shift.baseline_value else None
    line.low, line.high = finite(shift.low), finite(shift.high)
    line.threshold, line.outcome, line.reason = threshold, outcome, reason
    line.regression = outcome == "fail"
    return line


def unpaired_line(rule: MetricRule, base_runs: Sequence[Array], cand_runs: Sequence[Array],
                  policy: Policy) -> tuple[MetricLine, UnpairedShift | None]:
    """Judge one gate from the sides' runs (runs without a value of the metric left out)."""
    base = [r for r in base_runs if r.size]
    cand = [r for r in cand_runs if r.size]
    n_base, n_cand = sum(r.size for r in base), sum(r.size for r in cand)
    if min(n_base, n_cand) < policy.min_samples:
        line = gate_line(rule, min(n_base, n_cand), policy, reason=(
            f"{n_base} baseline and {n_cand} candidate values of {rule.metric}, fewer than the "
            f"{policy.min_samples} required on each side"))
        line.method = "unpaired"
        return line, None
    shift = unpaired_shift(base, cand, rule.statistic, policy.confidence, policy.saved.run_to_run_spread)
    return judge_unpaired(rule, shift, policy), shift
