"""The sequential judgment: every gate anytime-valid at every look, so a run may stop once decided.

The path ``abserve.compare.judge`` takes for a policy with ``mode: sequential``
(every shipped policy but ``default`` and ``aa-placement``: ``cpu-default``, ``gpu``, ...):

- warm-up: the fixed count, then the compared arms' initial transient with
  ``sequential.warmup: auto`` (``compare.warmup.detected_warmup``);
- equality: on every exchange (a warm-up request's output compares like any other), with
  anytime-valid rate intervals (``verdict.sequential_equality``);
- latency ``hl`` rules: the counterbalanced mean shift (``gates.shift_line``); percentile rules on
  quantile confidence sequences (``sequential.tails: anytime``, ``compare.quantile_cs``) or, with
  ``tails: fixed``, the fixed-sample line (``judge_fixed.metric_line``) marked not anytime-valid;
  improvements, costs per item and strata at every look (``compare.sequential``, ``strata``);
- verdict: the critical gates decide; a non-critical line only makes it marginal when it proved
  a regression, also one a guard then held back as ``unstable`` (``verdict.overall``).

A look is a whole round of blocks (``sequential.look_ends``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from abserve.compare.blocked import pair_placement
from abserve.compare.gates import improvement_line, per_item_line, shift_line
from abserve.compare.judge_fixed import metric_line
from abserve.compare.latency import RequestLatency
from abserve.compare.model import EqualityLine, EqualityVerdict, MetricLine
from abserve.compare.policy import MetricRule, Policy
from abserve.compare.sequential import look_ends
from abserve.compare.strata import stratum_lines
from abserve.compare.tail_gate import drift_guard_tails, tail_line
from abserve.compare.verdict import sequential_equality
from abserve.compare.warmup import detected_warmup, fixed_warmup
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]


class Sequential:
    """``judge``'s sequential path (``abserve.compare.judge.JudgmentPath``)."""

    sequential = True
    compares_warmup = True  # equality does not depend on how warm an arm was

    def judged(self, ordered: list[Exchange], lat: Latencies, policy: Policy) -> tuple[list[Exchange], str]:
        """The exchanges after the warm-up (detected with ``sequential.warmup: auto``), and why."""
        if policy.sequential.warmup == "auto":
            return detected_warmup(ordered, lat, policy)
        return fixed_warmup(ordered, policy)

    def equality(self, main: EqualityLine, floor: tuple[int, int] | None, policy: Policy) -> EqualityVerdict:
        """Baseline/candidate mismatches against the floor, anytime-valid; names the first one."""
        first = main.examples[0].request_id if main.examples else None
        return sequential_equality(main.summary.mismatches, main.comparable, floor, policy, first)

    def gates(self, judged: list[Exchange], lat: Latencies,
              policy: Policy) -> tuple[list[MetricLine], bool, int]:
        """Every gate judged anytime-valid at every look; whether placement was controlled; looks."""
        roles = policy.arms
        levels = {pair_placement(ex.tags, roles.baseline, roles.candidate) for ex in judged} - {None}
        ends = look_ends(judged, max(len(levels), 1), policy.sequential.look_every)
        known = bool(levels)
        lines = [latency_line(rule, judged, lat, policy, ends, known) for rule in policy.metrics]
        lines += [improvement_line(rule, judged, lat, policy, ends) for rule in policy.improvements]
        lines += [per_item_line(rule, judged, lat, policy, ends) for rule in policy.per_item]
        lines += stratum_lines(judged, lat, policy, ends, known)
        drift_guard_tails(lines)
        return lines, known, len(ends)


def latency_line(rule: MetricRule, judged: list[Exchange], lat: Latencies, policy: Policy,
                 ends: list[int], placement_known: bool) -> MetricLine:
    """One latency rule: the shift for ``hl``, a percentile by ``sequential.tails``."""
    if rule.statistic == "hl":
        return shift_line(rule, judged, lat, policy, ends, placement_known)
    if policy.sequential.tails == "anytime":
        return tail_line(rule, judged, lat, policy, ends, placement_known)
    line = metric_line(rule, judged, lat, policy)
    line.reason += " (fixed-sample interval, not anytime-valid)"
    return line
