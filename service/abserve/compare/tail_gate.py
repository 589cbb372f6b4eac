"""A tail gate's line: the p95/p99 rules of a sequential policy, judged at every look (issue 47, 58).

``tail_line`` judges a percentile rule with anytime-valid sequences (``sequential.tails:
anytime``). ``paired`` (``sequential.tail_design``, the default): the line shows the ``p``-quantile
of the per-request difference with its quantile confidence sequence (``compare.quantile_cs``),
and decides on the **net share of requests slowed beyond their own allowance**
(``compare.slowed_share``: the candidate slower by more than ``allowed_relative`` of the request's
own latency, minus the mirrored direction, which identical builds have as often): ``fail`` once
it is proven above ``1 - p`` (1% for p99, 5% for p95) and spread over both halves of the run,
``pass`` once proven at most that. ``two-sample``: the difference of the arms' own quantiles.

A critical tail the policy does not require (``tails_required: false``) is a guard: it fails the
run once proven, and while it looks guilty (open, its estimate beyond its allowance) it is
marginal and critical, so the run goes on until it decides and a budget end is not a pass; and
until it has judged ``sequential.tail_watch`` pairs an open guard is critical too (it has not
yet watched long enough to see a stall on a few percent of requests).
Without controlled placement a fail must hold with each allowance widened by the policy's
``unknown_placement_bias``. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np

from abserve.base.units import ms
from abserve.compare.causes import UNCONTROLLED, hold, placement_detail
from abserve.compare.gate_line import finite, gate_line
from abserve.compare.latency import RequestLatency, paired_sample
from abserve.compare.model import MetricLine, TailShare
from abserve.compare.policy import MetricRule, Policy
from abserve.compare.quantile_cs import (
    QuantileBounds,
    TailDifference,
    quantile_path,
    spread_over_run,
    tail_decision,
)
from abserve.compare.sequential import counts_before
from abserve.compare.slowed_share import share_decision, share_sequence, slowed_signs
from abserve.compare.trajectory import Looks
from abserve.compare.verdict import threshold_for
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]
_ms = partial(ms, missing="unbounded")  # an infinite side of an interval is unbounded


def _trajectory(counts: Sequence[int], path: Sequence[QuantileBounds | TailDifference]) -> Looks:
    """A line's looks (columns: ``abserve.compare.trajectory``), its bounds shown finite."""
    looks = Looks()
    for n, d in zip(counts, path, strict=True):
        looks.append(n, d.estimate, finite(d.low), finite(d.high))
    return looks


Decide = Callable[[float], str]  # a tail's decision with each allowance widened by a margin
Guilty = Callable[[float], bool]  # whether a tail's estimate is beyond its allowance (widened by a margin)
PROVEN = ("fail", "unstable")  # decisions that proved a regression (unstable: in one half)


def _paired_path(rule: MetricRule, base: np.ndarray, cand: np.ndarray, p: float, alpha: float,
                 counts: list[int]) -> tuple[Looks, Decide, Guilty]:
    """The shown path (the ``p``-quantile of the per-request difference); the decision on the net
    share of requests slowed beyond their own allowance (``compare.slowed_share``)."""
    diffs = np.asarray(cand, dtype=float) - np.asarray(base, dtype=float)
    judged = counts[-1] if counts else 0
    looks = _trajectory(counts, quantile_path(diffs, counts, p, alpha))

    def signs(margin: float) -> np.ndarray:
        return slowed_signs(base[:judged], cand[:judged], rule.allowed_relative, rule.allowed_absolute,
                            margin)

    def decide(margin: float) -> str:
        return share_spread_decision(signs(margin), counts, 1 - p, alpha) if counts else "open"

    def guilty(margin: float) -> bool:
        return bool(judged) and float(np.mean(signs(margin))) > 1 - p

    return looks, decide, guilty


def share_spread_decision(signs: np.ndarray, counts: Sequence[int], allowed: float, alpha: float) -> str:
    """``share_decision``; a fail must also be spread over the run (``spread_decision``'s rule on
    the slowed requests), else ``unstable``."""
    whole = share_decision(signs, counts, allowed, alpha)
    if whole != "fail":
        return whole
    return "fail" if spread_over_run(np.asarray(signs) > 0) else "unstable"


def tail_share(rule: MetricRule, p: float, base: np.ndarray, cand: np.ndarray, counts: Sequence[int],
               alpha: float) -> TailShare:
    """The net share of requests slowed beyond their own allowance, with its interval."""
    signs = slowed_signs(base, cand, rule.allowed_relative, rule.allowed_absolute)
    got = share_sequence(signs, counts, alpha)
    return TailShare(allowed_share=1 - p, per_request=rule.allowed_relative, absolute=rule.allowed_absolute,
                     n=got.n, slowed=got.slowed, mirrored=got.mirrored, estimate=got.estimate, low=got.low,
                     high=got.high)


def share_allowance(t: TailShare) -> str:
    """A guard's allowance per request: ``at most 1% of requests slowed by more than 10% each``."""
    each = f"{t.per_request:.0%} of their own latency" + (
        f" (or {ms(t.absolute, signed=False)})" if t.absolute else "")
    return f"at most {t.allowed_share:.0%} of requests slowed by more than {each}"


def slowed_span(t: TailShare) -> str:
    """What was proven: ``slowed +8.2% [+2.5%, +15.0%] net (10 slowed, 1 mirrored of 110)``."""
    return (f"slowed {t.estimate:+.1%} [{t.low:+.1%}, {t.high:+.1%}] net ({t.slowed} slowed, "
            f"{t.mirrored} mirrored of {t.n})")


def share_words(t: TailShare) -> str:
    """What was measured against what is allowed, in words."""
    return f"requests {slowed_span(t)}; allowed: {share_allowance(t)}"


def _two_sample_path(rule: MetricRule, base: np.ndarray, cand: np.ndarray, p: float, alpha: float,
                     counts: list[int]) -> tuple[Looks, Decide, Guilty]:
    path = [TailDifference(b, c) for b, c in zip(quantile_path(base, counts, p, alpha / 2),
                                                 quantile_path(cand, counts, p, alpha / 2), strict=True)]

    def guilty(margin: float) -> bool:
        if not path:
            return False
        b = path[-1].baseline.estimate
        return path[-1].estimate > max(rule.allowed_relative * abs(b), rule.allowed_absolute) + margin

    def decide(margin: float) -> str:
        return tail_decision(path[-1], rule.allowed_relative, rule.allowed_absolute, rule.direction,
                             margin) if path else "open"

    return _trajectory(counts, path), decide, guilty


def tail_line(rule: MetricRule, judged: list[Exchange], lat: Latencies, policy: Policy,
              ends: Sequence[int], placement_known: bool = True) -> MetricLine:
    """A percentile rule (p50/p95/p99) judged with anytime-valid sequences at every look.

    ``paired`` (the policy's ``sequential.tail_design``): the interval shown is that of the
    ``p``-quantile of the per-request difference; the decision is on the net share of requests
    slowed beyond their own allowance (``tail_share``; fail: more than ``1 - p`` of requests
    proven slowed beyond it, net of the mirrored direction). ``two-sample``: the difference of
    the arms' own quantiles.
    Without controlled placement a fail must hold with each allowance widened by the policy's
    ``unknown_placement_bias`` (as a shift's must: ``abserve.compare.gates``).
    """
    roles, alpha = policy.arms, 1.0 - policy.confidence
    sample = paired_sample(judged, lat, rule.metric, roles.baseline, roles.candidate)
    p = int(rule.statistic[1:]) / 100
    index = sample.index  # each pair's position in ``judged``: no dict of every request id
    counts = counts_before(index, ends)
    paired = policy.sequential.tail_design == "paired"
    line = gate_line(rule, len(index), policy)
    line.kind = "tail"
    line.method = "anytime-quantile-paired" if paired else "anytime-quantile-two-sample"
    path = _paired_path if paired else _two_sample_path
    line.trajectory, decide, guilty = path(rule, sample.baseline, sample.candidate, p, alpha, counts)
    bias = 0.0 if placement_known else policy.sequential.unknown_placement_bias.get(rule.metric, 0.0)
    decision = decide(0.0)
    held = decision in PROVEN and bias > 0 and decide(bias) not in PROVEN
    decision = "open" if held else decision
    widen = policy.neighbours.widen.get(rule.metric)
    line.fail_beyond_neighbours = widen is not None and decision == "fail" and decide(bias + widen) == "fail"
    if len(index) < policy.min_samples or not counts:
        line.reason = f"{len(index)} paired requests, fewer than the {policy.min_samples} required"
        return _guarded(line, rule, policy, False)
    last = line.trajectory[-1]
    base_v = float(np.quantile(sample.baseline, p))
    line.baseline_value, line.candidate_value = base_v, float(np.quantile(sample.candidate, p))
    line.estimate, line.low, line.high = last.estimate, last.low, last.high
    # The relative change is the same estimate as the difference (paired: the p-quantile of the
    # per-request difference, not the difference of the arms' own quantiles), over the baseline's.
    line.relative = last.estimate / base_v if base_v and last.estimate is not None else None
    span = f"{_ms(last.estimate or 0.0)} [{_ms(_inf(last.low, -1))}, {_ms(_inf(last.high, 1))}]"
    if paired:
        line.tail_share = tail_share(rule, p, sample.baseline[:counts[-1]], sample.candidate[:counts[-1]],
                                     counts, alpha)
        what = f"{share_words(line.tail_share)}; {rule.statistic} of the per-request difference {span}"
        how = "net share of slowed requests, betting confidence sequence"
    else:
        line.threshold = threshold_for(rule, base_v)
        what, how = f"{rule.statistic} difference {span}", "two-sample quantile sequences, alpha/2 per arm"
    line.regression = decision in PROVEN
    if decision == "fail":
        line.outcome, line.reason = "fail", f"{what}: proven, spread over both halves of the run ({how})"
    elif decision == "unstable":
        line.outcome = "unstable"
        line.reason = (f"{what}: proven over the run but most of the slowed requests in one half of it: "
                       f"a block of slow requests (cold arm, drift), not a tail ({how})")
    elif decision == "pass":
        line.outcome, line.reason = "pass", f"{what}: ruled out ({how})"
    else:
        line.reason = f"{what}: not yet decided ({how})"
    if held:
        line.reason += (f"; placement not controlled by abserve: slowdowns this small could be its "
                        f"bias ({ms(bias)})")
        hold(line, "placement", placement_detail(bias, UNCONTROLLED, line.threshold or 0.0))
    elif bias > 0 and line.regression:
        line.reason += (f"; placement not controlled by abserve, and the slowdowns exceed each allowance "
                        f"by more than its bias ({ms(bias)})")
    return _guarded(line, rule, policy, guilty(bias))


def _inf(x: float | None, sign: int) -> float:
    return sign * math.inf if x is None else x


def _guarded(line: MetricLine, rule: MetricRule, policy: Policy, guilty: bool) -> MetricLine:
    """A critical tail gate that is not required to pass gates once it fails, and while it looks
    guilty: an open guard whose estimate is beyond its allowance (``guilty``) is ``marginal`` and
    critical, so a sequential run goes on until it decides (``gates.stop_now``) and a run whose
    budget ends first is not a PASS (``verdict.overall``: marginal). An open guard whose estimate
    is within its allowance blocks nothing."""
    if rule.critical and not policy.sequential.tails_required:
        line.guard = True
        watch = policy.sequential.tail_watch
        watching = line.outcome == "inconclusive" and not guilty and line.n < watch
        held_guilty = line.outcome == "unstable" and guilty  # proven in one half only: more may spread it
        if guilty and line.outcome == "inconclusive":
            line.outcome = "marginal"
            line.reason += ("; a guard whose estimate is beyond its allowance: the run goes on until it "
                            "decides, and is not a pass while it does not")
        elif held_guilty:
            line.reason += "; beyond its allowance though not yet spread over the run: the run goes on"
        elif watching:
            line.reason += (f"; a guard still watching: it keeps the run from passing until it has judged "
                            f"{watch} pairs (sequential.tail_watch)")
        line.critical = line.outcome in ("fail", "marginal") or watching or held_guilty
        if not line.critical:
            line.reason += "; a guard: fails the run once proven, never keeps it from passing"
    return line


def drift_guard_tails(lines: Sequence[MetricLine]) -> None:
    """A tail fail on a metric whose shift drifted beyond its allowance is ``unstable``.

    The drift guard keeps a difference that moved over the run from deciding a build; a drift
    moves the tail too, so the tail of that metric cannot fail while the shift is unstable.
    """
    drifted = {m.metric for m in lines if m.kind == "shift" and m.drift is not None and m.drift.unstable}
    for line in lines:
        if line.kind == "tail" and line.outcome == "fail" and line.metric in drifted:
            line.outcome = "unstable"
            line.reason += (f"; but the {line.metric} shift drifted beyond its allowance over the run: "
                            "not stable enough to decide")
            if line.guard:
                line.critical = False
