"""Paired statistics checked against scipy and brute force on the same data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from abserve.compare.stats.paired import (
    bootstrap_quantile_diff,
    clopper_pearson,
    excess_over_floor,
    hodges_lehmann,
    signed_rank_critical,
    theil_sen_trend,
    walsh_order_statistic,
)


def brute_walsh(d: np.ndarray) -> np.ndarray:
    return np.sort([(d[i] + d[j]) / 2 for i, j in itertools.combinations_with_replacement(range(d.size), 2)])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40), st.data())
def test_walsh_order_statistic_matches_brute_force(values: list[float], data: st.DataObject) -> None:
    d = np.asarray(values)
    w = brute_walsh(d)
    rank = data.draw(st.integers(1, w.size))
    assert walsh_order_statistic(d, rank) == pytest.approx(w[rank - 1], abs=1e-9)


@pytest.mark.parametrize("n", [6, 12, 30, 50])
def test_hl_interval_bounds_are_where_scipy_exact_wilcoxon_crosses_alpha(n: int) -> None:
    d = np.random.default_rng(n).normal(0.3, 1.0, n)
    iv = hodges_lehmann(d, 0.95)
    assert iv.estimate == pytest.approx(np.median(brute_walsh(d)))
    eps = 1e-9
    for bound in (iv.low, iv.high):
        inside = bound + eps if bound == iv.low else bound - eps
        outside = bound - eps if bound == iv.low else bound + eps
        assert sps.wilcoxon(d - inside, method="exact").pvalue > 0.05
        assert sps.wilcoxon(d - outside, method="exact").pvalue <= 0.05


def test_hl_interval_large_n_matches_scipy_normal_approximation() -> None:
    d = np.random.default_rng(7).standard_t(3, 800) * 0.002 + 0.001
    iv = hodges_lehmann(d, 0.95)
    for bound, step in ((iv.low, 1e-10), (iv.high, -1e-10)):
        assert sps.wilcoxon(d - (bound + step), method="approx", correction=True).pvalue > 0.049
        assert sps.wilcoxon(d - (bound - step), method="approx", correction=True).pvalue < 0.051


def test_signed_rank_critical_matches_exact_tables() -> None:
    # Classic two-sided 5% critical values of T (Wilcoxon tables): n=10 -> 8, n=20 -> 52.
    assert signed_rank_critical(10, 0.95) == 8
    assert signed_rank_critical(20, 0.95) == 52
    assert signed_rank_critical(5, 0.95) == -1  # n=5 can never reach 5% two-sided


def test_hl_recovers_a_known_shift_and_too_small_n_has_no_interval() -> None:
    rng = np.random.default_rng(3)
    iv = hodges_lehmann(rng.normal(0.002, 0.0005, 400))
    assert iv.low < 0.002 < iv.high
    assert iv.high - iv.low < 0.0002
    tiny = hodges_lehmann([1.0, 2.0, 3.0])
    assert tiny.estimate == 2.0
    assert tiny.low == -np.inf
    assert tiny.high == np.inf
    with pytest.raises(ValueError):
        hodges_lehmann([])


def test_bootstrap_quantile_diff_covers_a_known_shift_and_is_seeded() -> None:
    rng = np.random.default_rng(11)
    base = rng.lognormal(-3, 0.3, 500)
    cand = base * 1.10  # every request 10% slower: p95 difference = 0.1 * p95(base)
    iv = bootstrap_quantile_diff(base, cand, 0.95, resamples=1000, seed=5)
    truth = 0.1 * np.quantile(base, 0.95)
    assert iv.estimate == pytest.approx(truth)
    assert iv.low <= truth <= iv.high
    assert iv.low > 0
    again = bootstrap_quantile_diff(base, cand, 0.95, resamples=1000, seed=5)
    assert (again.low, again.high) == (iv.low, iv.high)
    with pytest.raises(ValueError):
        bootstrap_quantile_diff(base, cand[:10], 0.5)


def test_clopper_pearson_matches_scipy_and_known_values() -> None:
    iv = clopper_pearson(0, 100)
    assert iv.low == 0.0
    assert iv.high == pytest.approx(0.0362, abs=1e-4)
    iv = clopper_pearson(7, 50, 0.9)
    ref = sps.binomtest(7, 50).proportion_ci(0.9, method="exact")
    assert (iv.low, iv.high) == pytest.approx((ref.low, ref.high))
    assert clopper_pearson(0, 0).high == 1.0


def test_floor_test_is_fishers_one_sided_exact_test() -> None:
    assert excess_over_floor(12, 200, 1, 200) < 0.01
    assert excess_over_floor(1, 200, 0, 200) == pytest.approx(0.5)
    ref = sps.fisher_exact([[5, 95], [2, 98]], alternative="greater").pvalue
    assert excess_over_floor(5, 100, 2, 100) == pytest.approx(ref)


def test_theil_sen_trend_finds_cost_per_item() -> None:
    rng = np.random.default_rng(2)
    items = rng.integers(1, 512, 300)
    diffs = 3e-4 + 2e-6 * items + rng.normal(0, 1e-4, 300)
    t = theil_sen_trend(items, diffs)
    assert t is not None
    assert t.low < 2e-6 < t.high
    assert t.low > 0
    assert t.intercept == pytest.approx(3e-4, abs=3e-5)  # the fitted line's level at zero items
    assert theil_sen_trend([4, 4, 4], [1.0, 2.0, 3.0]) is None
