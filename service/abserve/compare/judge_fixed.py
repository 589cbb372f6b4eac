"""The fixed-sample judgment: every gate judged once, on every judged pair, at the run's end.

The path ``abserve.compare.judge`` takes for a policy with ``mode: fixed`` (the built-in
default: ``configs/policy/default.yaml``'s; ``aa-placement.yaml``):

- warm-up: the policy's fixed count only (``compare.warmup.fixed_warmup``);
- equality: on the judged exchanges, with exact tests against the A/A' floor
  (``verdict.equality_verdict``);
- each latency rule: one interval, the Hodges-Lehmann shift (counterbalanced over placements
  when the run was cut into blocks, ``compare.placement``) or the paired bootstrap of a
  percentile; strata keep their anytime-valid shift (``compare.strata``), looked at once;
- each improvement claim: the same shift on the pairs with at least ``min_items`` items; each
  cost per item: the Theil-Sen slope of the paired difference against items per request (its
  Kendall interval), decided as the sequential path decides them (``gates.decide_*``), so no
  gate the policy declares is left out in either mode;
- verdict: every line counts, a marginal non-critical one included (``verdict.overall``).

Its intervals hold for one look: a run judged this way must not be stopped early on what they
show (``abserve.compare.judge_sequential`` is the path that may). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from abserve.compare.blocked import BlockedShift
from abserve.compare.causes import hold, placement_detail
from abserve.compare.gate_line import finite, gate_line, guarded
from abserve.compare.gates import (
    decide_improvement,
    decide_per_item,
    improvement_stub,
    per_item_stub,
    varied,
)
from abserve.compare.latency import RequestLatency, items_of, paired_sample
from abserve.compare.model import EqualityLine, EqualityVerdict, MetricLine
from abserve.compare.placement import bias_guard, sample_levels, shift_of
from abserve.compare.policy import ImprovementRule, MetricRule, PerItemRule, Policy
from abserve.compare.stats.paired import bootstrap_quantile_diff, evenly, hodges_lehmann, theil_sen_trend
from abserve.compare.strata import stratum_lines
from abserve.compare.verdict import equality_verdict, latency_outcome, threshold_for
from abserve.compare.warmup import fixed_warmup
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]


class FixedSample:
    """``judge``'s fixed-sample path (``abserve.compare.judge.JudgmentPath``)."""

    sequential = False
    compares_warmup = False  # equality is judged on the judged exchanges only

    def judged(self, ordered: list[Exchange], lat: Latencies, policy: Policy) -> tuple[list[Exchange], str]:
        """The exchanges after the fixed warm-up, and that sentence."""
        return fixed_warmup(ordered, policy)

    def equality(self, main: EqualityLine, floor: tuple[int, int] | None, policy: Policy) -> EqualityVerdict:
        """Baseline/candidate mismatches against the floor's ``(mismatches, comparable)``."""
        return equality_verdict(main.summary.mismatches, main.comparable, floor, policy)

    def gates(self, judged: list[Exchange], lat: Latencies,
              policy: Policy) -> tuple[list[MetricLine], bool, int]:
        """Every gate at one look (latency, improvement, cost per item, strata); placement
        counts as known."""
        lines = [metric_line(rule, judged, lat, policy) for rule in policy.metrics]
        lines += [improvement_once(rule, judged, lat, policy) for rule in policy.improvements]
        lines += [per_item_once(rule, judged, lat, policy) for rule in policy.per_item]
        lines += stratum_lines(judged, lat, policy, [len(judged)], True)
        return lines, True, 1


def metric_line(rule: MetricRule, exchanges: list[Exchange], lat: Latencies, policy: Policy) -> MetricLine:
    """Judge one latency rule on the paired per-request values, once.

    An ``hl`` line of a run with counterbalanced blocks is judged on the counterbalanced
    estimate (``abserve.compare.placement``); the pooled one is kept as ``naive_*``.
    """
    roles = policy.arms
    sample = paired_sample(exchanges, lat, rule.metric, roles.baseline, roles.candidate)
    n = len(sample.diffs)
    if n < policy.min_samples:
        too_few = f"{n} paired requests, fewer than the {policy.min_samples} the policy requires"
        return gate_line(rule, n, policy, reason=too_few)
    shift = None
    if rule.statistic == "hl":
        iv = hodges_lehmann(sample.diffs, policy.confidence)
        base_v, cand_v = float(np.median(sample.baseline)), float(np.median(sample.candidate))
        if policy.placement.counterbalance:
            levels = sample_levels(sample, exchanges, roles.baseline, roles.candidate)
            shift = shift_of(sample, levels, policy)
    else:
        q = int(rule.statistic[1:]) / 100
        iv = bootstrap_quantile_diff(sample.baseline, sample.candidate, q, confidence=policy.confidence,
                                     resamples=policy.bootstrap_resamples, seed=policy.seed)
        base_v, cand_v = float(np.quantile(sample.baseline, q)), float(np.quantile(sample.candidate, q))
    threshold = threshold_for(rule, base_v)
    est, low, high = (iv.estimate, iv.low, iv.high) if shift is None else \
        (shift.estimate, shift.low, shift.high)
    outcome, reason = latency_outcome(rule, est, low, high, threshold)
    unguarded = outcome
    if shift is not None:
        reason = f"counterbalanced over {len(shift.levels)} placements: {reason}"
        outcome, reason = bias_guard(rule, outcome, reason, shift, threshold, policy)
    line = gate_line(rule, n, policy, reason=reason)
    line.outcome, line.threshold, line.regression = outcome, threshold, outcome == "fail"
    line.baseline_value, line.candidate_value = base_v, cand_v
    line.estimate, line.relative = est, est / base_v if base_v else None
    line.low, line.high = finite(low), finite(high)
    if shift is not None:
        line.method = "counterbalanced"
        line.naive_estimate, line.naive_low, line.naive_high = iv.estimate, finite(iv.low), finite(iv.high)
        line.placement_bias = shift.bias
        if outcome != unguarded:
            hold(line, "placement", placement_detail(shift.bias, shift.bias_placement, threshold))
    return line


def _shift_once(sample_diffs: np.ndarray, shift: BlockedShift | None,
                policy: Policy) -> tuple[float, float, float, str]:
    """The estimate, interval and method of a shift: counterbalanced when ``shift`` is one."""
    if shift is not None:
        return shift.estimate, shift.low, shift.high, "counterbalanced"
    iv = hodges_lehmann(sample_diffs, policy.confidence)
    return iv.estimate, iv.low, iv.high, "pooled"


def improvement_once(rule: ImprovementRule, exchanges: list[Exchange], lat: Latencies,
                     policy: Policy) -> MetricLine:
    """The claimed improvement on the requests with at least ``min_items`` items, at one look:
    the Hodges-Lehmann shift of their pairs (counterbalanced over placements when blocked)."""
    members = [ex for ex in exchanges if (items_of(ex) or 0) >= rule.min_items]
    roles = policy.arms
    sample = paired_sample(members, lat, rule.metric, roles.baseline, roles.candidate)
    line = improvement_stub(rule, len(sample.diffs), policy)
    if len(sample.diffs) < policy.min_samples:
        return guarded(line, rule.critical, rule.required, len(sample.diffs) > 0)
    shift = shift_of(sample, sample_levels(sample, members, roles.baseline, roles.candidate), policy) \
        if policy.placement.counterbalance else None
    estimate, low, high, line.method = _shift_once(sample.diffs, shift, policy)
    decide_improvement(line, rule, estimate, low, high)
    return guarded(line, rule.critical, rule.required, True)


def per_item_once(rule: PerItemRule, exchanges: list[Exchange], lat: Latencies, policy: Policy) -> MetricLine:
    """The cost per item at one look: the Theil-Sen slope of the paired difference against
    items per request, with its interval (at most ``stats.paired.TREND_POINTS`` pairs, evenly spaced)."""
    roles = policy.arms
    sample = paired_sample(exchanges, lat, rule.metric, roles.baseline, roles.candidate)
    items = sample.items
    line, fits = per_item_stub(rule, items, policy)
    if not fits:
        return guarded(line, rule.critical, rule.required, varied(items))
    known = evenly(np.flatnonzero(np.fromiter((i is not None for i in items), dtype=bool, count=len(items))))
    xs = np.array([items[i] for i in known.tolist()], dtype=np.float64)
    trend = theil_sen_trend(xs, sample.diffs[known], policy.confidence)
    if trend is None:
        line.reason = "no slope could be fitted"
        return line
    decide_per_item(line, rule, trend.slope, trend.low, trend.high)
    line.method = "theil-sen"
    return guarded(line, rule.critical, rule.required, True)
