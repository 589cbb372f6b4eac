"""Sample-size planning: how many requests a run needs to detect a given latency effect.

From a pilot run's paired differences ``candidate - baseline`` of one metric, the spread ``sigma``
is estimated robustly (IQR / 1.349, never below the classical standard deviation's robust
fallback when the IQR is zero). The paired-t sample size for a two-sided interval at the
policy's confidence with the requested power,

    n_t = ((z_{1-alpha/2} + z_{power}) * sigma / effect)^2,

is divided by the Wilcoxon signed-rank test's asymptotic relative efficiency under normal data
(3/pi, the conservative case), since the judgment uses the Hodges–Lehmann/Wilcoxon interval.
For outputs, the number of requests needed to see at least one mismatch with probability
``power`` when mismatches happen at ``rate`` is ``ln(1 - power) / ln(1 - rate)``. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel
from scipy import stats as sps

from abserve.compare.latency import paired_sample, request_latency
from abserve.compare.policy import Policy
from abserve.compare.stats.anytime import mixture_radius
from abserve.compare.warmup import drop_warmup
from abserve.model.records import Exchange

WILCOXON_ARE = 3.0 / math.pi


class Plan(BaseModel):
    """Requests needed for one effect, and the pilot numbers behind the answer."""

    metric: str
    pilot_pairs: int
    pilot_sigma: float  # robust spread of the paired differences (seconds)
    pilot_median_baseline: float | None = None
    effect: float  # seconds
    confidence: float
    power: float
    requests_needed: int
    mismatch_rate: float | None = None
    requests_for_mismatch: int | None = None


def robust_sigma(diffs: np.ndarray) -> float:
    """IQR / 1.349 (= sigma for normal data); the MAD or SD when the IQR is zero."""
    q1, q3 = np.quantile(diffs, [0.25, 0.75])
    sigma = float((q3 - q1) / 1.349)
    if sigma == 0.0:
        sigma = float(1.4826 * np.median(np.abs(diffs - np.median(diffs))))
    if sigma == 0.0 and diffs.size > 1:
        sigma = float(np.std(diffs, ddof=1))
    return sigma


def requests_needed(sigma: float, effect: float, confidence: float, power: float) -> int:
    """Paired requests for a Wilcoxon interval to exclude zero at ``effect`` with ``power``."""
    if effect <= 0:
        raise ValueError("effect must be positive")
    if not 0 < power < 1 or not 0 < confidence < 1:
        raise ValueError("power and confidence must lie strictly between 0 and 1")
    z = float(sps.norm.ppf(1 - (1 - confidence) / 2) + sps.norm.ppf(power))
    n_t = (z * sigma / effect) ** 2
    return max(6, math.ceil(n_t / WILCOXON_ARE))


def requests_for_mismatch(rate: float, power: float) -> int:
    """Requests to see at least one mismatch with probability ``power`` at ``rate``."""
    if not 0 < rate < 1:
        raise ValueError("mismatch rate must lie strictly between 0 and 1")
    return math.ceil(math.log(1 - power) / math.log(1 - rate))


def plan(
    exchanges: list[Exchange],
    policy: Policy,
    *,
    metric: str = "tpot",
    effect: float | None = None,
    effect_relative: float | None = None,
    power: float = 0.8,
    mismatch_rate: float | None = None,
) -> Plan:
    """Plan a run from a pilot run's exchanges; give ``effect`` (s) or ``effect_relative``."""
    judged, _ = drop_warmup(exchanges, policy)
    lat = {ex.request_id: {a: request_latency(o) for a, o in ex.arms.items()} for ex in judged}
    sample = paired_sample(judged, lat, metric, policy.arms.baseline, policy.arms.candidate)
    if len(sample.diffs) < 2:
        raise ValueError(f"pilot run has {len(sample.diffs)} paired {metric} values; need at least 2")
    median_base = float(np.median(sample.baseline))
    if effect is None:
        if effect_relative is None:
            raise ValueError("give an absolute effect or a relative one")
        effect = effect_relative * median_base
    sigma = robust_sigma(np.asarray(sample.diffs))
    return Plan(
        metric=metric,
        pilot_pairs=len(sample.diffs),
        pilot_sigma=sigma,
        pilot_median_baseline=median_base,
        effect=effect,
        confidence=policy.confidence,
        power=power,
        requests_needed=requests_needed(sigma, effect, policy.confidence, power),
        mismatch_rate=mismatch_rate,
        requests_for_mismatch=None if mismatch_rate is None else requests_for_mismatch(mismatch_rate, power),
    )


def anytime_pairs_needed(sigma: float, allowance: float, confidence: float, phi: float = 1.0,
                         limit: int = 1 << 20) -> int | None:
    """Pairs after which the anytime-valid interval of a mean shift is narrower than
    ``allowance`` on each side, when the pairs' differences spread by ``sigma`` (same units):
    where a sequential gate on a change with no effect decides (``gates.shift_line``'s
    intercept: ``anytime.mixture_radius`` with ``se = sigma / sqrt(n)``, ``n`` information and
    ``n - 2`` degrees of freedom). None when no count up to ``limit`` gets there."""
    if sigma <= 0 or allowance <= 0:
        return None
    alpha = 1.0 - confidence

    def narrow(n: int) -> bool:
        return mixture_radius(sigma / math.sqrt(n), float(n), n - 2, alpha, phi) <= allowance

    return first_true(narrow, 3, limit)


def first_true(holds: Callable[[int], bool], low: int, limit: int) -> int | None:
    """The smallest ``n > low`` for which the monotone ``holds(n)`` is true (doubling, then
    bisection); None when it is false up to ``limit``."""
    high = low + 1
    while not holds(high):
        low, high = high, high * 2
        if high > limit:
            return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if holds(mid) else (mid, high)
    return high
