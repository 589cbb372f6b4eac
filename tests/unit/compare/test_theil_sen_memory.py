"""Theil-Sen's trend gives scipy's floats without scipy's n x n working set (issue 30).

``judge.breakdowns`` fits a trend of each paired difference on items per request over at
most ``stats.TREND_POINTS`` (3,000) points. ``scipy.stats.theilslopes`` forms every pairwise
difference of x and of y as n x n arrays and masks them: ~200 MiB at 3,000 points, the peak
of a whole ``abserve report`` at 100,000 exchanges. ``stats.theil_sen_trend`` forms them a
block of rows at a time into the one array of slopes it sorts; the results must not move.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy import stats as sps

from abserve.compare.stats.paired import TREND_POINTS, theil_sen_trend

PEAK_BOUND = 48 * 2**20  # bytes at TREND_POINTS points; measured 41 MiB (scipy's way: 206 MiB)


def _points(n: int, levels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xs = rng.integers(1, levels + 1, n).astype(np.float64)
    ys = np.round(0.01 * xs + rng.normal(0, 0.05, n), 3)  # ties in y too
    return xs, ys


@pytest.mark.parametrize(("n", "levels", "confidence"),
                         [(3, 2, 0.95), (40, 3, 0.9), (700, 8, 0.95), (1500, 40, 0.99)])
def test_the_trend_is_scipys_to_the_last_bit(n: int, levels: int, confidence: float) -> None:
    xs, ys = _points(n, levels, seed=n)
    trend = theil_sen_trend(xs, ys, confidence)
    ref = sps.theilslopes(ys, xs, alpha=confidence)
    assert trend is not None
    assert (trend.slope, trend.intercept, trend.low, trend.high) == (
        float(ref.slope), float(ref.intercept), float(ref.low_slope), float(ref.high_slope))


def test_the_trend_at_the_most_points_stays_far_below_n_squared_arrays() -> None:
    xs, ys = _points(TREND_POINTS, 8, seed=1)
    tracemalloc.start()
    try:
        theil_sen_trend(xs, ys, 0.95)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND, f"{peak / 2**20:.0f} MiB traced"
