"""Paired statistics for an A/B run: Hodges–Lehmann shifts, bootstrap quantile differences,
binomial intervals, the noise-floor test and a trend over items per request.

Differences are always ``candidate - baseline`` (positive = the candidate is slower / larger).
Every function is pure; randomness comes only from a seeded ``numpy.random.Generator``.

The Hodges–Lehmann interval is the Walsh-average interval of the Wilcoxon signed-rank test:
with the ``M = n(n+1)/2`` Walsh averages ``(d_i + d_j)/2, i <= j`` sorted, and ``k`` the largest
integer with ``P(T+ <= k) <= alpha/2`` under H0, the interval is ``[W_(k+1), W_(M-k)]``: exactly
the shifts the two-sided signed-rank test does not reject. Order statistics of the Walsh averages
are found by bisection with an O(n log n) count, so no n² array is ever built.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from abserve.compare.stats.interval import Interval

EXACT_LIMIT = 400  # largest n for which the signed-rank null distribution is computed exactly

Array = NDArray[np.float64]


def _clean(values: ArrayLike) -> Array:
    arr = np.asarray(values, dtype=np.float64)
    finite: Array = arr[np.isfinite(arr)]
    return finite


def _signed_rank_counts(n: int) -> Array:
    """Null distribution of the signed-rank statistic T+ for n (no ties): P(T+ = t)."""
    dist = np.zeros(n * (n + 1) // 2 + 1)
    dist[0] = 1.0
    for rank in range(1, n + 1):
        dist[rank:] = dist[rank:] + dist[:-rank].copy()
        dist /= 2.0
    return dist


@functools.lru_cache(maxsize=256)
def signed_rank_critical(n: int, confidence: float) -> int:
    """Largest k with P(T+ <= k) <= (1 - confidence)/2 (k = -1 when none)."""
    alpha_half = (1.0 - confidence) / 2.0
    if n <= EXACT_LIMIT:
        cdf = np.cumsum(_signed_rank_counts(n))
        below = np.nonzero(cdf <= alpha_half * (1 + 1e-12))[0]
        return int(below[-1]) if below.size else -1
    mean = n * (n + 1) / 4.0
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    z = float(sps.norm.ppf(1.0 - alpha_half))
    return math.floor(mean - 0.5 - z * sd)


def _count_walsh_le(sorted_d: Array, t: float) -> int:
    """How many Walsh averages (d_i + d_j)/2, i <= j, are <= t."""
    # the same bounds, searched in ascending order (numpy narrows each search from the last)
    hi = np.searchsorted(sorted_d, (2.0 * t - sorted_d)[::-1], side="right")[::-1]
    idx = np.arange(sorted_d.size)
    return int(np.clip(hi - idx, 0, None).sum())


def _walsh_at_or_below(sorted_d: Array, t: float) -> float:
    """The largest Walsh average <= t (t must be at least the smallest one)."""
    hi = np.searchsorted(sorted_d, 2.0 * t - sorted_d, side="right") - 1
    idx = np.arange(sorted_d.size)
    ok = hi >= idx
    return float(((sorted_d[ok] + sorted_d[hi[ok]]) / 2.0).max())


def walsh_order_statistic(d: ArrayLike, rank: int) -> float:
    """The ``rank``-th smallest (1-based) Walsh average of ``d``, without building all of them."""
    s = np.sort(_clean(d))
    total = s.size * (s.size + 1) // 2
    if not 1 <= rank <= total:
        raise ValueError(f"rank {rank} outside 1..{total}")
    lo, hi = float(s[0]), float(s[-1])
    if _count_walsh_le(s, lo) >= rank:
        return lo
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        if _count_walsh_le(s, mid) >= rank:
            hi = mid
        else:
            lo = mid
    return _walsh_at_or_below(s, hi)


def hodges_lehmann(diffs: ArrayLike, confidence: float = 0.95) -> Interval:
    """One-sample Hodges–Lehmann estimate of paired differences, with its signed-rank interval.

    When n is too small for any interval at this confidence, the bounds are infinite.
    """
    d = _clean(diffs)
    n = d.size
    if n == 0:
        raise ValueError("no finite paired differences")
    total = n * (n + 1) // 2
    if total % 2:
        estimate = walsh_order_statistic(d, (total + 1) // 2)
    else:
        estimate = (walsh_order_statistic(d, total // 2) + walsh_order_statistic(d, total // 2 + 1)) / 2
    k = signed_rank_critical(n, confidence)
    if k < 0:
        return Interval(estimate, -math.inf, math.inf, n, confidence)
    low = walsh_order_statistic(d, k + 1)
    high = walsh_order_statistic(d, total - k)
    return Interval(estimate, low, high, n, confidence)


def bootstrap_quantile_diff(
    baseline: ArrayLike,
    candidate: ArrayLike,
    q: float,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Paired percentile bootstrap of ``quantile(candidate, q) - quantile(baseline, q)``.

    The two arrays are aligned per request; requests are resampled as pairs.
    """
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("baseline and candidate must be non-empty and paired")
    estimate = float(np.quantile(b, q) - np.quantile(a, q))
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    chunk = max(1, 2_000_000 // a.size)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, a.size, size=(stop - start, a.size))
        out[start:stop] = np.quantile(b[idx], q, axis=1) - np.quantile(a[idx], q, axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(out, [tail, 1.0 - tail])
    return Interval(estimate, float(low), float(high), int(a.size), confidence)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> Interval:
    """Exact binomial interval of a rate k/n (the estimate is k/n; n = 0 gives [0, 1])."""
    if n == 0:
        return Interval(math.nan, 0.0, 1.0, 0, confidence)
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Interval(k / n, float(ci.low), float(ci.high), n, confidence)


def excess_over_floor(k_candidate: int, n_candidate: int, k_floor: int, n_floor: int) -> float:
    """One-sided Fisher exact p-value that the candidate's mismatch rate exceeds the floor's."""
    table = [[k_candidate, n_candidate - k_candidate], [k_floor, n_floor - k_floor]]
    return float(sps.fisher_exact(table, alternative="greater").pvalue)


def exceeds_rate(k: int, n: int, rate: float) -> float:
    """One-sided exact binomial p-value that the true rate of k/n exceeds ``rate``."""
    if rate <= 0.0:
        return 0.0 if k > 0 else 1.0
    return float(sps.binomtest(k, n, rate, alternative="greater").pvalue)


@dataclass(frozen=True)
class Trend:
    """Theil–Sen slope of a paired difference against items per request."""

    slope: float
    low: float
    high: float
    n: int
    confidence: float
    intercept: float = 0.0  # the fitted line is intercept + slope * x


def theil_sen_trend(x: ArrayLike, y: ArrayLike, confidence: float = 0.95) -> Trend | None:
    """Robust slope of ``y`` on ``x`` with its interval; None with fewer than 3 points or one x."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    if xs.size < 3 or np.unique(xs).size < 2:
        return None
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        slope, intercept, low, high = _theil_sen(ys, xs, confidence)
    return Trend(slope, low, high, int(xs.size), confidence, intercept)


_SLOPE_ROWS = 128  # rows of the pairwise differences formed at once


def _pair_slopes(ys: Array, xs: Array) -> Array:
    """Every ``(y_i - y_j) / (x_i - x_j)`` with ``x_i > x_j``, sorted: the values
    ``scipy.stats.theilslopes`` sorts, formed ``_SLOPE_ROWS`` rows at a time into one array
    (scipy forms the full n x n differences and masks: ~200 MiB at 3,000 points)."""
    below = np.searchsorted(np.sort(xs), xs, side="left")  # per i: how many x_j < x_i
    slopes = np.empty(int(below.sum()), dtype=np.float64)
    at = 0
    for start in range(0, xs.size, _SLOPE_ROWS):
        dx = xs[start:start + _SLOPE_ROWS, np.newaxis] - xs
        dy = ys[start:start + _SLOPE_ROWS, np.newaxis] - ys
        keep = dx > 0
        chunk = dy[keep] / dx[keep]
        slopes[at:at + chunk.size] = chunk
        at += chunk.size
    slopes.sort()
    return slopes


def _repeat_sum(values: Array) -> int:
    _, counts = np.unique(values, return_counts=True)
    return sum(int(k) * (int(k) - 1) * (2 * int(k) + 5) for k in counts if k > 1)


def _theil_sen(ys: Array, xs: Array, confidence: float) -> tuple[float, float, float, float]:
    """``scipy.stats.theilslopes(ys, xs, alpha=confidence)`` (method ``separate``, the same
    floats): slope, intercept, low and high slope; its pairwise slopes formed by rows."""
    slopes = _pair_slopes(ys, xs)
    nt = len(slopes)
    medslope = np.median(slopes[(nt - 1) // 2:nt // 2 + 1])  # sorted: its middle, not a copy of all
    medinter = np.median(ys) - medslope * np.median(xs)
    alpha = 1.0 - confidence if confidence > 0.5 else confidence
    z = sps.norm.ppf(alpha / 2.0)
    ny = len(ys)
    sigsq = 1 / 18. * (ny * (ny - 1) * (2 * ny + 5) - _repeat_sum(xs) - _repeat_sum(ys))
    try:
        sigma = np.sqrt(sigsq)
        upper = min(int(np.round((nt - z * sigma) / 2.)), len(slopes) - 1)
        lower = max(int(np.round((nt + z * sigma) / 2.)) - 1, 0)
        low, high = (float(v) for v in slopes[[lower, upper]])
    except (ValueError, IndexError):
        low = high = math.nan
    return float(medslope), float(medinter), low, high


TREND_POINTS = 3000  # Theil-Sen takes every pair of points: memory and time grow with n**2


def evenly(positions: np.ndarray, most: int = TREND_POINTS) -> np.ndarray:
    """At most ``most`` of ``positions``, evenly spaced in start order (all of a run of up to
    that many): the trend of a soak of 100,000 requests from every pair would need tens of
    GiB; a sub-sample's interval is only wider, never falsely narrow."""
    if len(positions) <= most:
        return positions
    picks = np.linspace(0, len(positions) - 1, most).round().astype(int)
    picked: np.ndarray = positions[picks]
    return picked


def quantiles(values: ArrayLike, qs: tuple[float, ...]) -> list[float]:
    """Quantiles of the finite values (NaN when there are none)."""
    v = _clean(values)
    if v.size == 0:
        return [math.nan for _ in qs]
    return [float(x) for x in np.quantile(v, qs)]
