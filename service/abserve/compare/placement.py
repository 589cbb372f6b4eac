"""The block design in the judgment: counterbalanced shifts, placement bias, and its verdict rule.

``placement_line`` judges one arm pair and metric under the design the orchestrator ran
(``abserve.runs.blocks``): the counterbalanced estimate of ``abserve.compare.blocked``, the
naive estimate with every pair pooled, the bias of each placement, and a note saying what to
change when the design could not separate the bias. ``bias_guard`` is the verdict rule: a
line whose measured placement bias is comparable to its threshold is ``inconclusive`` unless
its outcome would stand even if that bias had not cancelled. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from abserve.base.units import ms
from abserve.compare.blocked import BlockedShift, blocked_shift, placements
from abserve.compare.latency import PairedSample, RequestLatency, paired_sample
from abserve.compare.model import Outcome, PlacementLevel, PlacementLine
from abserve.compare.policy import MetricRule, Policy
from abserve.compare.stats.paired import hodges_lehmann
from abserve.compare.verdict import latency_outcome
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]
ADVICE = "run more blocks, put fewer arms per core, or use a bigger machine"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def sample_levels(sample: PairedSample, exchanges: list[Exchange], left: str, right: str) -> list[str | None]:
    """The pair's placement of each paired request of ``sample`` (drawn from ``exchanges``)."""
    return placements((ex.tags for ex in sample.paired()), left, right)


def shift_of(sample: PairedSample, levels: list[str | None], policy: Policy) -> BlockedShift | None:
    """The counterbalanced shift of a paired sample (None: fewer than two usable placements)."""
    return blocked_shift(sample.diffs, sample.blocks, levels, policy.confidence,
                         policy.placement.min_block_pairs)


def placement_line(exchanges: list[Exchange], lat: Latencies, metric: str, left: str, right: str,
                   policy: Policy) -> PlacementLine:
    """The pair ``right - left`` of ``metric`` under the block design."""
    sample = paired_sample(exchanges, lat, metric, left, right)
    levels = sample_levels(sample, exchanges, left, right)
    line = PlacementLine(left=left, right=right, metric=metric, method="untagged", naive_n=len(sample.diffs))
    if len(sample.diffs):
        naive = hodges_lehmann(sample.diffs, policy.confidence)
        line.naive_estimate = naive.estimate
        line.naive_low, line.naive_high = _finite(naive.low), _finite(naive.high)
    distinct = {lv for lv in levels if lv is not None}
    if not distinct:
        line.note = "exchanges carry no placement tags: placement bias not measured"
        return line
    shift = shift_of(sample, levels, policy)
    if shift is None:
        line.method = "single-placement"
        line.note = (f"{len(distinct)} placement(s) with enough pairs per block: the bias of the "
                     f"placement cannot be separated from the effect; {ADVICE}")
        return line
    line.method = "counterbalanced"
    line.estimate, line.low, line.high = shift.estimate, shift.low, shift.high
    line.bias, line.bias_low, line.bias_high = shift.bias, shift.bias_low, shift.bias_high
    line.bias_placement, line.tau, line.df = shift.bias_placement, shift.tau, shift.df
    line.blocks_used, line.blocks_dropped = shift.blocks_used, shift.blocks_dropped
    line.levels = [PlacementLevel(placement=lv.placement, blocks=lv.blocks, n=lv.n, estimate=lv.estimate,
                                  low=_finite(lv.low), high=_finite(lv.high)) for lv in shift.levels]
    if shift.df == 0:
        line.note = "one block per placement: between-block variation not estimable; run more blocks"
    return line


def bias_guard(rule: MetricRule, outcome: Outcome, reason: str, shift: BlockedShift, threshold: float,
               policy: Policy) -> tuple[Outcome, str]:
    """``inconclusive`` when the placement bias is comparable to the threshold and matters.

    Counterbalancing cancels a bias that is the same in every block of a placement; a bias
    near the threshold leaves the verdict hostage to how exactly it cancelled. The outcome
    stands when the interval widened by the bias on both sides gives the same outcome.
    """
    bias = abs(shift.bias)
    if threshold <= 0 or bias < policy.placement.max_bias_ratio * threshold or outcome == "inconclusive":
        return outcome, reason
    robust, _ = latency_outcome(rule, shift.estimate, shift.low - bias, shift.high + bias, threshold)
    if robust == outcome:
        shown = ms(bias, signed=False)
        return outcome, f"{reason}; holds even if the placement bias ({shown}) had not cancelled"
    return "inconclusive", (
        f"{reason}; but the placement bias {ms(bias, signed=False)} ({shift.bias_placement}) is "
        f"{bias / threshold:.0%} of the threshold, so the outcome depends on it cancelling; {ADVICE}"
    )
