"""Roll per-exchange equality results up into one ``EqualityLine`` per arm pair.

Counts per class overall, by items-per-request bucket and by traffic profile, where the first
differences and first drifts fall in the output, the distribution of logprob drift among
exchanges with identical tokens, and the first mismatching exchanges as examples. Pure.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from abserve.compare.equality import CLASSES, PairDigest, PairResult, compare_pair
from abserve.compare.latency import items_of
from abserve.compare.model import ClassCounts, EqualityLine
from abserve.compare.policy import Policy, bucket_label
from abserve.compare.stats.paired import clopper_pearson, quantiles
from abserve.model.records import Exchange

MAX_EXAMPLES = 25
DRIFT_QUANTILES = tuple(i / 10 for i in range(11))


Pair = PairResult | PairDigest


class _Counts:
    """Equality classes counted over a group, as ``ClassCounts`` will show them."""

    __slots__ = ("classes", "total")

    def __init__(self) -> None:
        self.total = 0
        self.classes: Counter[str] = Counter()

    def add(self, cls: str) -> None:
        self.total += 1
        self.classes[cls] += 1

    def counts(self, mismatch: frozenset[str]) -> ClassCounts:
        got = self.classes
        return ClassCounts(total=self.total, counts={c: got.get(c, 0) for c in CLASSES},
                           mismatches=sum(got.get(c, 0) for c in mismatch))


def _order(item: tuple[str, object]) -> tuple[float, str]:
    head = item[0].split("-")[0].rstrip("+").lstrip("<")
    return (float(head) if head.isdigit() else math.inf, item[0])


def _grouped(groups: dict[str, _Counts], mismatch: frozenset[str]) -> dict[str, ClassCounts]:
    return {label: c.counts(mismatch) for label, c in sorted(groups.items(), key=_order)}


def _histogram(counter: Counter[int]) -> dict[str, int]:
    return {str(p): counter[p] for p in sorted(counter)}


class _RollUp:
    """One pass over a pair's results: counts, histograms and the drift values (8 bytes
    each), never a list of the results themselves (a digest builds each on access)."""

    def __init__(self, policy: Policy, mismatch: frozenset[str]) -> None:
        self.policy, self.mismatch = policy, mismatch
        self.summary, self.comparable = _Counts(), 0
        self.k = self.status = self.finish = self.usage = 0
        self.left_problems: Counter[str] = Counter()
        self.right_problems: Counter[str] = Counter()
        self.by_position: Counter[int] = Counter()
        self.drift_by_position: Counter[int] = Counter()
        self.by_items: dict[str, _Counts] = {}
        self.by_profile: dict[str, _Counts] = {}
        self.same_tokens, self.prompt_deltas = array("d"), array("d")
        self.prompt_drifts = self.prompt_only_drifts = 0
        self.prompt_drift_by_position: Counter[int] = Counter()
        self.first_mismatches: list[Pair] = []

    def add(self, r: Pair) -> None:
        cls = r.cls
        self.summary.add(cls)
        self.status += r.status_mismatch
        self.finish += r.finish_mismatch
        self.usage += r.usage_mismatch
        if r.left_problem:
            self.left_problems[r.left_problem] += 1
        if r.right_problem:
            self.right_problems[r.right_problem] += 1
        items = bucket_label(r.items, self.policy.items_buckets)
        self.by_items.setdefault(items, _Counts()).add(cls)
        self.by_profile.setdefault(r.profile or "untagged", _Counts()).add(cls)
        if cls != "incomparable":
            self._add_comparable(r, cls)

    def _add_comparable(self, r: Pair, cls: str) -> None:
        self.comparable += 1
        if cls in self.mismatch:
            self.k += 1
            if len(self.first_mismatches) < MAX_EXAMPLES:
                self.first_mismatches.append(r)
        if r.position is not None:
            self.by_position[r.position] += 1
        if cls in ("identical", "drift"):
            self.same_tokens.append(r.max_logprob_delta)
        if cls == "drift" and r.drift_position is not None:
            self.drift_by_position[r.drift_position] += 1
        if r.prompt_positions is not None:
            self.prompt_deltas.append(r.prompt_logprob_delta or 0.0)
            if r.prompt_drift_position is not None:
                self.prompt_drifts += 1
                self.prompt_only_drifts += cls == "drift" and r.drift_position is None
                self.prompt_drift_by_position[r.prompt_drift_position] += 1


def equality_line(results: Iterable[Pair], left: str, right: str, policy: Policy,
                  examples: Sequence[PairResult] | None = None) -> EqualityLine:
    """Aggregate one arm pair's results under the policy's mismatch classes, in one pass over
    ``results`` (an iterable: a digest's are built one at a time). ``examples``: the full
    results of the first mismatches, in start order (default: taken from ``results``, which
    must then be full ``PairResult``s; the digest passes its digests and its kept few)."""
    mismatch = frozenset(policy.equality.mismatch_classes)
    roll = _RollUp(policy, mismatch)
    for r in results:
        roll.add(r)
    ci = clopper_pearson(roll.k, roll.comparable, policy.confidence)
    picked = [r for r in roll.first_mismatches if isinstance(r, PairResult)]
    return EqualityLine(
        left=left,
        right=right,
        summary=roll.summary.counts(mismatch),
        comparable=roll.comparable,
        rate=None if not roll.comparable else ci.estimate,
        low=ci.low,
        high=ci.high,
        status_mismatches=roll.status,
        finish_mismatches=roll.finish,
        usage_mismatches=roll.usage,
        left_problems=dict(roll.left_problems),
        right_problems=dict(roll.right_problems),
        by_position=_histogram(roll.by_position),
        drift_by_position=_histogram(roll.drift_by_position),
        by_items=_grouped(roll.by_items, mismatch),
        by_profile=_grouped(roll.by_profile, mismatch),
        drift_quantiles=quantiles(roll.same_tokens, DRIFT_QUANTILES) if roll.same_tokens else [],
        examples=picked if examples is None else list(examples)[:MAX_EXAMPLES],
        prompt_sampled=len(roll.prompt_deltas),
        prompt_drifts=roll.prompt_drifts,
        prompt_only_drifts=roll.prompt_only_drifts,
        prompt_drift_by_position=_histogram(roll.prompt_drift_by_position),
        prompt_drift_quantiles=quantiles(roll.prompt_deltas, DRIFT_QUANTILES) if roll.prompt_deltas else [],
    )


def pair_results(exchanges: list[Exchange], left: str, right: str, tolerance: float) -> list[PairResult]:
    """Compare every exchange between two arms, tagged with its profile and items."""
    out = []
    for ex in exchanges:
        r = compare_pair(
            ex.request_id,
            left,
            right,
            ex.arms.get(left),
            ex.arms.get(right),
            drift_tolerance=tolerance,
        )
        r.profile, r.items = ex.tags.get("profile", "untagged"), items_of(ex)
        out.append(r)
    return out


def drift_tolerance(exchanges: list[Exchange], policy: Policy, floor: str | None) -> float:
    """The logprob tolerance: the policy's, or the A/A' drift quantile when that is larger.

    With ``drift_floor_quantile`` set and a floor arm present, the tolerance is that quantile
    of the largest logprob difference per exchange between baseline and floor where their
    tokens agree (output or sampled prompt logprobs, whichever moved more): drift the same
    build shows under the same load is not held against B.
    """
    rule = policy.equality
    if rule.drift_floor_quantile is None or floor is None:
        return rule.drift_tolerance
    raw = pair_results(exchanges, policy.arms.baseline, floor, 0.0)
    deltas = [max(r.max_logprob_delta, r.prompt_logprob_delta or 0.0)
              for r in raw if r.cls in ("identical", "drift")]
    if not deltas:
        return rule.drift_tolerance
    return max(rule.drift_tolerance, float(np.quantile(deltas, rule.drift_floor_quantile)))
