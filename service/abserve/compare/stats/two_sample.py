"""Two-sample statistics of unpaired latencies: the Hodges-Lehmann shift and quantile intervals.

``abserve compare`` judges saved runs whose requests were not sent to both builds at once, so
nothing is paired: the candidate's distribution is set against the baseline's.

- ``hl_shift``: the two-sample Hodges-Lehmann estimate (the median of all ``y_j - x_i``) with
  the distribution-free interval of the Mann-Whitney test (normal approximation of the rank
  statistic, exact enough for the 30+ requests a gate needs). Order statistics of the ``n*m``
  differences are found by bisection on the value with an ``O(m log n)`` count, so no ``n*m``
  array is ever built; samples above ``HL_CAP`` are thinned to evenly spaced order statistics
  (the distribution kept, the interval a little wider than the full sample's).
- ``quantile_interval``: the binomial order-statistic interval of one sample's quantile.

Pure; ``candidate - baseline`` throughout (positive = slower).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps

from abserve.compare.stats.interval import Interval

Array = NDArray[np.float64]
HL_CAP = 20_000  # values per sample that the shift's order statistics are searched over
_TOLERANCE = 1e-8  # seconds: the bisection stops once the order statistic is this close


def thinned(sorted_values: Array, most: int = HL_CAP) -> Array:
    """``most`` evenly spaced order statistics of a sorted sample (itself when it is smaller)."""
    if sorted_values.size <= most:
        return sorted_values
    idx = np.round(np.linspace(0, sorted_values.size - 1, most)).astype(np.int64)
    return sorted_values[idx]


def _count_at_most(x: Array, y: Array, t: float) -> int:
    """How many pairs have ``y_j - x_i <= t`` (x, y sorted)."""
    return int(x.size * y.size - np.searchsorted(x, y - t, side="left").sum())


def _smallest_above(x: Array, y: Array, t: float) -> float:
    """The smallest difference ``y_j - x_i`` greater than ``t`` (x, y sorted; inf when none)."""
    idx = np.searchsorted(x, y - t, side="left") - 1  # per y_j, the largest x_i below y_j - t
    ok = idx >= 0
    return float(np.min(y[ok] - x[idx[ok]])) if ok.any() else math.inf


def kth_difference(x: Array, y: Array, k: int) -> float:
    """The ``k``-th smallest (1-based) of the ``n*m`` differences ``y_j - x_i`` (x, y sorted).

    Bisection brackets it in ``(lo, hi]``; then it is snapped to the exact difference (the
    bound itself would turn a tie at 0, as in a run whose TPOT is mostly 0, into a few ns)."""
    lo, hi = float(y[0] - x[-1]), float(y[-1] - x[0])
    if _count_at_most(x, y, lo) >= k:
        return lo
    while hi - lo > _TOLERANCE * max(1.0, abs(hi)):
        mid = (lo + hi) / 2
        if _count_at_most(x, y, mid) >= k:
            hi = mid
        else:
            lo = mid
    for _ in range(64):  # distinct differences within the tolerance: a handful at most
        exact = _smallest_above(x, y, lo)  # the smallest pair not counted at lo
        if exact > hi:
            break
        if exact <= lo or _count_at_most(x, y, exact) >= k:  # (<= lo: rounding of y - x)
            return exact
        lo = exact
    return hi


def hl_shift(baseline: Array, candidate: Array, confidence: float) -> Interval:
    """The two-sample Hodges-Lehmann shift of ``candidate`` over ``baseline`` and its
    Mann-Whitney interval (two-sided at ``confidence``); infinite bounds when too few."""
    x = thinned(np.sort(baseline))
    y = thinned(np.sort(candidate))
    n, m = x.size, y.size
    if n == 0 or m == 0:
        raise ValueError("a sample is empty")
    total = n * m
    estimate = (kth_difference(x, y, (total + 1) // 2) + kth_difference(x, y, total // 2 + 1)) / 2
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    k = math.floor(total / 2 - z * math.sqrt(total * (n + m + 1) / 12))
    if k < 1:
        return Interval(estimate, -math.inf, math.inf, min(n, m), confidence)
    return Interval(estimate, kth_difference(x, y, k), kth_difference(x, y, total - k + 1), min(n, m),
                    confidence)


def quantile_interval(sorted_values: Array, q: float, confidence: float) -> Interval:
    """The ``q``-quantile of a sorted sample with its binomial order-statistic interval
    (two-sided at ``confidence``; an unbounded side where the sample is too small)."""
    n = sorted_values.size
    if n == 0:
        raise ValueError("the sample is empty")
    estimate = float(np.quantile(sorted_values, q))
    tail = (1 - confidence) / 2
    lo_rank = int(sps.binom.ppf(tail, n, q))  # order statistics, 1-based: X_(lo_rank) .. X_(hi_rank)
    hi_rank = int(sps.binom.ppf(1 - tail, n, q)) + 1
    low = float(sorted_values[lo_rank - 1]) if lo_rank >= 1 else -math.inf
    high = float(sorted_values[hi_rank - 1]) if hi_rank <= n else math.inf
    return Interval(estimate, low, high, n, confidence)


def quantile_difference(baseline: Array, candidate: Array, q: float, confidence: float) -> Interval:
    """``quantile(candidate) - quantile(baseline)``: each side's order-statistic interval at
    half the error rate (Bonferroni), combined to bound the difference."""
    inner = 1 - (1 - confidence) / 2
    b = quantile_interval(np.sort(baseline), q, inner)
    c = quantile_interval(np.sort(candidate), q, inner)
    return Interval(c.estimate - b.estimate, c.low - b.high, c.high - b.low, min(b.n, c.n), confidence)


def standard_error(interval: Interval) -> float:
    """The standard error a two-sided normal interval of this width implies (inf when unbounded)."""
    z = float(sps.norm.ppf(0.5 + interval.confidence / 2))
    return (interval.high - interval.low) / (2 * z)
