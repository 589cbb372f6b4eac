"""Roll per-exchange equality results up into one ``EqualityLine`` per arm pair.

Counts per class overall, by items-per-request bucket and by traffic profile, where the first
differences and first drifts fall in the output, the distribution of logprob drift among
exchanges with identical tokens, and the first mismatching exchanges as examples. Pure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from abserve.compare.equality import CLASSES, PairDigest, PairResult, compare_pair
from abserve.compare.latency import items_of
from abserve.compare.model import ClassCounts, EqualityLine
from abserve.compare.policy import Policy, bucket_label
from abserve.compare.stats import clopper_pearson, quantiles
from abserve.records import Exchange

MAX_EXAMPLES = 25
DRIFT_QUANTILES = tuple(i / 10 for i in range(11))


Pair = PairResult | PairDigest


def _count(results: Sequence[Pair], mismatch: frozenset[str]) -> ClassCounts:
    counter: Counter[str] = Counter(r.cls for r in results)
    return ClassCounts(
        total=len(results),
        counts={c: counter.get(c, 0) for c in CLASSES},
        mismatches=sum(counter.get(c, 0) for c in mismatch),
    )


def _grouped(
    results: Sequence[Pair], key: str, policy: Policy, mismatch: frozenset[str]
) -> dict[str, ClassCounts]:
    groups: dict[str, list[Pair]] = {}
    for r in results:
        label = bucket_label(r.items, policy.items_buckets) if key == "items" else (r.profile or "untagged")
        groups.setdefault(label, []).append(r)
    return {label: _count(rs, mismatch) for label, rs in sorted(groups.items(), key=_order)}


def _order(item: tuple[str, object]) -> tuple[float, str]:
    head = item[0].split("-")[0].rstrip("+").lstrip("<")
    return (float(head) if head.isdigit() else math.inf, item[0])


def _histogram(positions: list[int | None]) -> dict[str, int]:
    counter = Counter(p for p in positions if p is not None)
    return {str(p): counter[p] for p in sorted(counter)}


def equality_line(results: Sequence[Pair], left: str, right: str, policy: Policy,
                  examples: Sequence[PairResult] | None = None) -> EqualityLine:
    """Aggregate one arm pair's results under the policy's mismatch classes. ``examples``: the
    full results of the first mismatches, in start order (default: taken from ``results``,
    which must then be full ``PairResult``s; the digest passes its digests and its kept few)."""
    mismatch = frozenset(policy.equality.mismatch_classes)
    comparable = [r for r in results if r.cls != "incomparable"]
    k = sum(r.cls in mismatch for r in comparable)
    ci = clopper_pearson(k, len(comparable), policy.confidence)
    same_tokens = [r.max_logprob_delta for r in comparable if r.cls in ("identical", "drift")]
    prompts = [r for r in comparable if r.prompt_positions is not None]
    prompt_deltas = [r.prompt_logprob_delta or 0.0 for r in prompts]
    prompt_drifts = [r for r in prompts if r.prompt_drift_position is not None]
    return EqualityLine(
        left=left,
        right=right,
        summary=_count(results, mismatch),
        comparable=len(comparable),
        rate=None if not comparable else ci.estimate,
        low=ci.low,
        high=ci.high,
        status_mismatches=sum(r.status_mismatch for r in results),
        finish_mismatches=sum(r.finish_mismatch for r in results),
        usage_mismatches=sum(r.usage_mismatch for r in results),
        left_problems=dict(Counter(r.left_problem for r in results if r.left_problem)),
        right_problems=dict(Counter(r.right_problem for r in results if r.right_problem)),
        by_position=_histogram([r.position for r in comparable]),
        drift_by_position=_histogram([r.drift_position for r in comparable if r.cls == "drift"]),
        by_items=_grouped(results, "items", policy, mismatch),
        by_profile=_grouped(results, "profile", policy, mismatch),
        drift_quantiles=quantiles(same_tokens, DRIFT_QUANTILES) if same_tokens else [],
        examples=_examples(comparable, mismatch) if examples is None else list(examples)[:MAX_EXAMPLES],
        prompt_sampled=len(prompts),
        prompt_drifts=len(prompt_drifts),
        prompt_only_drifts=sum(r.cls == "drift" and r.drift_position is None for r in prompt_drifts),
        prompt_drift_by_position=_histogram([r.prompt_drift_position for r in prompt_drifts]),
        prompt_drift_quantiles=quantiles(prompt_deltas, DRIFT_QUANTILES) if prompt_deltas else [],
    )


def _examples(comparable: list[Pair], mismatch: frozenset[str]) -> list[PairResult]:
    picked = [r for r in comparable if r.cls in mismatch][:MAX_EXAMPLES]
    return [r for r in picked if isinstance(r, PairResult)]


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
