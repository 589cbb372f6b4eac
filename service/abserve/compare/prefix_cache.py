"""The prefix-cache hit rate of each arm, and a difference between arms as a finding of its own.

With the prefix cache on, the arms receive identical request sequences, so their caches should
evolve alike: a candidate that finds markedly fewer (or more) of the prompt's tokens in its
cache than the baseline does so by its own doing (a changed cache key, block size, eviction,
a scheduler that frees blocks early). ``abserve run`` keeps each arm's counters per block
(``BlockRecord.prefix_cache``: tokens looked up and tokens found, from the servers' metrics);
here they are summed over the run's blocks and compared.

**Not a verdict change.** A hit rate is a mechanism, not what users feel: a change may trade
hits for a faster prefill, and a lost hit costs what the prefill of those tokens costs. The
verdict stays with the latency gates (a later-turn stratum on TTFT sees lost reuse first); the
finding says why they moved, or warns that the caches diverged while latency did not show it
yet. The policy's ``prefix_cache.max_hit_rate_difference`` is the threshold (default 0.05: five
points of hit rate). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from abserve.compare.model import ArmSummary, CacheRate, PrefixCacheFinding
from abserve.compare.policy import Policy
from abserve.model.provenance import BlockRecord


def arm_rates(blocks: Iterable[BlockRecord]) -> dict[str, CacheRate]:
    """Per arm, its prefix cache's queries and hits summed over the blocks that counted them."""
    totals: dict[str, tuple[int, int]] = {}
    for block in blocks:
        for arm, counts in block.prefix_cache.items():
            queries, hits = totals.get(arm, (0, 0))
            totals[arm] = (queries + counts.queries, hits + counts.hits)
    return {arm: CacheRate(queries=q, hits=h) for arm, (q, h) in sorted(totals.items())}


def arm_labels(arms: Mapping[str, ArmSummary]) -> dict[str, str]:
    """How the finding names each arm: its proven (else expected) lookup and name,
    ``linear+salt-prefix (b)``, or ``arm b`` when it has none."""
    return {name: f"{lookup} ({name})" if (lookup := arm.proven_lookup or arm.expected_lookup)
            else f"arm {name}" for name, arm in arms.items()}


def _rate_words(name: str, rate: CacheRate | None) -> str:
    if rate is None or not rate.queries:
        return f"{name} not measured"
    return f"{name} {rate.rate:.1%} of {rate.queries:,} prompt tokens"


def prefix_cache_finding(blocks: Iterable[BlockRecord], policy: Policy,
                         labels: dict[str, str] | None = None) -> PrefixCacheFinding | None:
    """The arms' hit rates and whether baseline and candidate differ by more than the policy
    allows; None when no block recorded a prefix cache (it was off, or the run is older).
    ``labels``: how to name each arm in the sentence (``linear+salt-prefix (b)``)."""
    rates = arm_rates(blocks)
    if not rates:
        return None
    names = labels or {}
    base_name, cand_name = policy.arms.baseline, policy.arms.candidate
    base, cand = rates.get(base_name), rates.get(cand_name)
    threshold = policy.prefix_cache.max_hit_rate_difference
    both = base is not None and cand is not None and base.queries > 0 and cand.queries > 0
    difference = cand.rate - base.rate if both and base is not None and cand is not None else None
    flagged = difference is not None and abs(difference) > threshold
    said = ", ".join(_rate_words(names.get(arm, f"arm {arm}"), rates.get(arm))
                     for arm in (base_name, cand_name))
    if difference is None:
        text = f"Prefix-cache hit rate: {said}; the arms cannot be compared."
    elif flagged:
        text = (f"Prefix-cache hit rates differ between the arms: {said} ({difference * 100:+.1f} points, "
                f"beyond the {threshold * 100:g} points the policy allows); the arms received identical "
                "requests, so the candidate's cache reuses prompts differently (the latency gates judge "
                "what it costs).")
    else:
        text = (f"Prefix-cache hit rates alike: {said} ({difference * 100:+.1f} points, within "
                f"{threshold * 100:g}).")
    return PrefixCacheFinding(arms=rates, difference=difference, threshold=threshold, flagged=flagged,
                              text=text)
