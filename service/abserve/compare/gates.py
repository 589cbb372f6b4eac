"""The gate lines of a judgment: one ``MetricLine`` each (built by ``abserve.compare.gate_line``),
decided or not yet. The sequential judgment (``judge_sequential``, and ``strata`` for its
strata) builds its lines here; the fixed judgment (``judge_fixed``) shares the decisions and
stubs (``decide_improvement``, ``decide_per_item``, ``improvement_stub``, ``per_item_stub``,
``varied``); ``runs.rounds`` asks ``stop_now``.

- ``shift_line``: a latency rule (``hl``) judged on the anytime-valid counterbalanced shift:
  ``pass`` when the whole interval is within the allowance, ``fail`` when beyond it. Its
  drift over the run is measured beside it; with ``drift: guard`` a drift whose interval lies
  entirely beyond the allowance makes the line ``unstable``. Without controlled placement a
  ``fail`` must clear the allowance plus the policy's ``unknown_placement_bias``.
- ``improvement_line``: the claimed improvement on requests with at least ``min_items``
  items: ``pass`` when proven (interval below ``-at_least``), ``fail`` when ruled out.
- ``per_item_line``: the cost per item (seconds per item): ``pass`` when the interval is at
  most the allowed slope, ``fail`` when entirely above it.
- ``stop_now``: a sequential run stops when a critical gate failed or every critical gate
  passed.

Pure; the intervals come from ``abserve.compare.sequential``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from abserve.base.units import ms, us
from abserve.compare.causes import UNCONTROLLED, hold, placement_detail
from abserve.compare.gate_line import finite, gate_line, guarded
from abserve.compare.latency import RequestLatency, paired_sample
from abserve.compare.model import DECIDED, Drift, Look, MetricLine, Outcome
from abserve.compare.policy import ImprovementRule, MetricRule, PerItemRule, Policy
from abserve.compare.sequential import (
    Design,
    coefficient_path,
    design_of,
    placement_biases,
    stratum,
    winsorize,
)
from abserve.compare.trajectory import Looks
from abserve.compare.verdict import latency_outcome, threshold_for
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]
GateRule = TypeVar("GateRule", ImprovementRule, PerItemRule)


def _lo(look: Look) -> float:
    return -math.inf if look.low is None else look.low


def _hi(look: Look) -> float:
    return math.inf if look.high is None else look.high


def _est(look: Look) -> float:
    return 0.0 if look.estimate is None else look.estimate


def _bound(x: float | None) -> float | None:
    return None if x is None else finite(x)


def _looks(path: Sequence[Look]) -> Looks:
    """The trajectory a line keeps (columns: ``abserve.compare.trajectory``), bounds shown finite."""
    looks = Looks()
    for lk in path:
        looks.append(lk.n, _bound(lk.estimate), _bound(lk.low), _bound(lk.high))
    return looks


def _design(metric: str, exchanges: list[Exchange], lat: Latencies, policy: Policy,
            ends: Sequence[int]) -> tuple[Design, np.ndarray]:
    roles = policy.arms
    sample = paired_sample(exchanges, lat, metric, roles.baseline, roles.candidate)
    return design_of(sample, exchanges, roles.baseline, roles.candidate, ends), sample.baseline


def _alpha(policy: Policy) -> float:
    return 1.0 - policy.confidence


def _path(design: Design, column: str, policy: Policy) -> list[Look]:
    """The anytime-valid path of one coefficient of ``design`` over the looks."""
    return coefficient_path(design, column, _alpha(policy), policy.sequential.phi, policy.sequential.clip)


def shift_line(rule: MetricRule, exchanges: list[Exchange], lat: Latencies, policy: Policy,
               ends: Sequence[int], placement_known: bool) -> MetricLine:
    """One latency rule on the counterbalanced shift of the mean, anytime-valid."""
    design, baseline = _design(rule.metric, exchanges, lat, policy, ends)
    line = gate_line(rule, len(design.diffs), policy, statistic="mean")
    if len(design.diffs) < policy.min_samples or not design.looks:
        line.reason = f"{len(design.diffs)} paired requests, fewer than the {policy.min_samples} required"
        return line
    path = _path(design, "shift", policy)
    last = path[-1]
    base_v = float(np.median(baseline))
    threshold = threshold_for(rule, base_v)
    outcome, reason = latency_outcome(rule, _est(last), _lo(last), _hi(last), threshold)
    biases = placement_biases(design, _alpha(policy), policy.sequential.phi, policy.sequential.clip)
    unguarded = outcome
    if not placement_known:
        outcome, reason = _unknown_placement(rule, outcome, reason, last, threshold, policy)
        if outcome != unguarded:
            bias = policy.sequential.unknown_placement_bias.get(rule.metric, 0.0)
            hold(line, "placement", placement_detail(bias, UNCONTROLLED, threshold))
    drift = _drift(design, threshold, policy)
    line.regression = outcome == "fail"
    if drift.unstable and outcome in DECIDED:
        outcome = "unstable"
        reason += (f"; but the difference drifted by {ms(drift.estimate)} [{ms(drift.low)}, "
                   f"{ms(drift.high)}] over the run, beyond the allowance: not stable enough to decide")
    line.statistic, line.outcome, line.reason, line.threshold = "mean", outcome, reason, threshold
    line.baseline_value, line.candidate_value = base_v, base_v + _est(last)
    line.estimate, line.low, line.high = last.estimate, last.low, last.high
    line.relative = _est(last) / base_v if base_v else None
    line.method = "anytime-counterbalanced" if biases else "anytime-pooled"
    line.placement_bias = max((abs(iv.estimate) for iv in biases.values()), default=None)
    line.trajectory, line.drift = _looks(path), drift
    _, clipped = winsorize(np.asarray(design.diffs), policy.sequential.clip)
    if clipped:
        line.reason += (f"; {clipped} of {len(design.diffs)} pair differences winsorized at "
                        f"{policy.sequential.clip:g} robust sd (interference spikes)")
    return line


def _unknown_placement(rule: MetricRule, outcome: Outcome, reason: str, last: Look, threshold: float,
                       policy: Policy) -> tuple[Outcome, str]:
    """A fail without controlled placement must clear the allowance plus the assumed bias."""
    bias = policy.sequential.unknown_placement_bias.get(rule.metric, 0.0)
    reason += "; placement not controlled by abserve"
    if outcome != "fail" or bias <= 0:
        return outcome, reason
    strict, _ = latency_outcome(rule, _est(last), _lo(last), _hi(last), threshold + bias)
    if strict == "fail":
        return "fail", reason + f", and the shift exceeds the allowance by more than its bias ({ms(bias)})"
    return "inconclusive", reason + f": a shift this small could be the placement's bias ({ms(bias)})"


def _drift(design: Design, threshold: float, policy: Policy) -> Drift:
    path = _path(design, "drift", policy)
    last = path[-1]
    low, high = _lo(last), _hi(last)
    beyond = threshold > 0 and (low > threshold or high < -threshold)
    return Drift(estimate=_est(last), low=finite(low), high=finite(high),
                 unstable=beyond and policy.sequential.drift == "guard", trajectory=_looks(path))


def improvement_line(rule: ImprovementRule, exchanges: list[Exchange], lat: Latencies, policy: Policy,
                     ends: Sequence[int]) -> MetricLine:
    """The claimed improvement on the stratum of requests with at least ``min_items`` items."""
    design, _ = _design(rule.metric, exchanges, lat, policy, ends)
    part = stratum(design, rule.min_items)
    line = improvement_stub(rule, len(part.diffs), policy)
    if len(part.diffs) < policy.min_samples or not part.looks:
        line.reason = line.reason or "no look holds its pairs yet"
        return guarded(line, rule.critical, rule.required, len(part.diffs) > 0)
    return _judged(line, rule, _path(part, "shift", policy), "anytime-counterbalanced", decide_improvement)


def improvement_stub(rule: ImprovementRule, n: int, policy: Policy) -> MetricLine:
    """An improvement gate's line over ``n`` pairs of its stratum, not yet judged; the reason
    says so when they are fewer than ``min_samples`` (both judgment paths start here)."""
    line = gate_line(rule, n, policy)
    line.kind, line.stratum, line.direction = "improvement", f">= {rule.min_items} items", "decrease"
    line.threshold = -rule.at_least
    if n < policy.min_samples:
        line.reason = (f"{n} paired requests with >= {rule.min_items} items, fewer than "
                       f"the {policy.min_samples} required")
    return line


def decide_improvement(line: MetricLine, rule: ImprovementRule, estimate: float, low: float,
                       high: float) -> None:
    """Pass when the interval proves the candidate faster by ``at_least``; fail when ruled out."""
    span = f"{ms(estimate)} [{ms(low)}, {ms(high)}]"
    claim = f"faster by at least {ms(rule.at_least, signed=False)}"
    _settle(line, (estimate, low, high), (high < -rule.at_least, low > -rule.at_least),
            (f"{span}: improvement proven ({claim})",
             f"{span}: the claimed improvement ({claim}) is ruled out",
             f"{span}: not yet known whether {claim}"))


def per_item_line(rule: PerItemRule, exchanges: list[Exchange], lat: Latencies, policy: Policy,
                  ends: Sequence[int]) -> MetricLine:
    """The cost per item (slope of the paired difference against items per request)."""
    design, _ = _design(rule.metric, exchanges, lat, policy, ends)
    line, fits = per_item_stub(rule, design.items, policy)
    if not fits:
        return guarded(line, rule.critical, rule.required, varied(design.items))
    return _judged(line, rule, _path(design, "per_item", policy), "anytime-regression", decide_per_item)


def varied(items: Sequence[int | None]) -> bool:
    """Whether the requests carry at least two item counts (a per-item slope can be reached)."""
    return len({it for it in items if it is not None}) >= 2


def per_item_stub(rule: PerItemRule, items: Sequence[int | None], policy: Policy) -> tuple[MetricLine, bool]:
    """A per-item gate's line over the pairs of item counts ``items``, not yet judged, and
    whether a slope can be fitted (else the reason says why: too few, or all alike); both
    judgment paths start here."""
    known = [it for it in items if it is not None]
    line = gate_line(rule, len(known), policy)
    line.kind, line.threshold = "per_item", rule.allowed
    if len(known) < policy.min_samples or len(set(known)) < 2:
        line.reason = f"{len(known)} paired requests with a known item count: too few, or all the same count"
        return line, False
    return line, True


def decide_per_item(line: MetricLine, rule: PerItemRule, estimate: float, low: float, high: float) -> None:
    """Pass when the slope's interval is at most the allowed cost per item; fail when beyond."""
    span = f"{us(estimate)} [{us(low)}, {us(high)}] per item"
    limit = f"allowed {us(rule.allowed)} per item"
    _settle(line, (estimate, low, high), (high <= rule.allowed, low > rule.allowed),
            (f"{span}: within the {limit}", f"{span}: beyond the {limit}",
             f"{span}: interval reaches beyond the {limit}"))


def _judged(line: MetricLine, rule: GateRule, path: list[Look], method: str,
            decide: Callable[[MetricLine, GateRule, float, float, float], None]) -> MetricLine:
    """An improvement or per-item gate judged at the last look of its coefficient's path."""
    end = path[-1]
    decide(line, rule, _est(end), _lo(end), _hi(end))
    line.method, line.trajectory = method, _looks(path)
    return guarded(line, rule.critical, rule.required, True)


def _settle(line: MetricLine, interval: tuple[float, float, float], ends: tuple[bool, bool],
            reasons: tuple[str, str, str]) -> None:
    """The ladder of both gates: ``pass`` when ``ends[0]`` (proven), ``fail`` when ``ends[1]``
    (ruled out), else undecided; each with its reason. The interval is kept, bounds finite."""
    estimate, low, high = interval
    proven, ruled_out = ends
    if proven:
        line.outcome, line.reason = "pass", reasons[0]
    elif ruled_out:
        line.outcome, line.reason = "fail", reasons[1]
    else:
        line.reason = reasons[2]
    line.estimate, line.low, line.high = estimate, finite(low), finite(high)


def stop_now(gates: Iterable[tuple[str, bool, Outcome]]) -> bool:
    """A sequential run may stop: a critical gate failed, or every critical gate passed."""
    critical = [outcome for _, is_critical, outcome in gates if is_critical]
    return any(o == "fail" for o in critical) or all(o == "pass" for o in critical)
