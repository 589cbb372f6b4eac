"""Two-sample statistics of unpaired latencies against brute force and their coverage."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from abserve.compare.stats.two_sample import hl_shift, kth_difference, quantile_difference, quantile_interval

values = st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(values, values, st.data())
def test_kth_difference_matches_brute_force(xs: list[float], ys: list[float], data: st.DataObject) -> None:
    x, y = np.sort(xs), np.sort(ys)
    brute = np.sort((y[:, None] - x[None, :]).ravel())
    k = data.draw(st.integers(1, brute.size))
    assert abs(kth_difference(x, y, k) - brute[k - 1]) <= 1e-6 * max(1.0, abs(brute[k - 1]))


def test_tied_differences_give_the_exact_order_statistic_not_a_bisection_bound() -> None:
    # AIPerf runs of a fast build on a busy CPU: most streams arrive in one burst, TPOT exactly 0.
    # The shift must be exactly 0, not the bisection's upper bound (a few ns), which a zero
    # allowance (5% of a baseline of 0) would fail.
    x = np.sort(np.r_[np.zeros(37), np.linspace(1e-4, 7e-3, 23)])
    y = np.sort(np.r_[np.zeros(59), [5.5e-6]])
    brute = np.sort((y[:, None] - x[None, :]).ravel())
    for k in (1, 1000, 2000, 3000, brute.size):
        assert kth_difference(x, y, k) == brute[k - 1]
    got = hl_shift(x, y, 0.95)
    assert got.estimate == 0.0
    assert got.high == 0.0


@settings(max_examples=40, deadline=None)
@given(values, values)
def test_hl_shift_is_the_median_of_all_differences(xs: list[float], ys: list[float]) -> None:
    brute = (np.array(ys)[:, None] - np.array(xs)[None, :]).ravel()
    got = hl_shift(np.array(xs), np.array(ys), 0.95)
    assert abs(got.estimate - float(np.median(brute))) <= 1e-6 * max(1.0, abs(float(np.median(brute))))
    assert got.low <= got.estimate <= got.high


def test_hl_interval_covers_a_known_shift_at_its_confidence() -> None:
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(200):
        x = rng.lognormal(0, 0.5, 60)
        y = rng.lognormal(0, 0.5, 50) + 0.2
        i = hl_shift(x, y, 0.9)
        covered += i.low <= 0.2 <= i.high
    assert 0.84 <= covered / 200 <= 0.96


def test_quantile_interval_covers_the_true_quantile() -> None:
    rng = np.random.default_rng(4)
    covered = 0
    for _ in range(300):  # exponential with median 1
        i = quantile_interval(np.sort(rng.exponential(1 / np.log(2), 200)), 0.5, 0.9)
        covered += i.low <= 1.0 <= i.high
    assert 0.85 <= covered / 300 <= 0.97


def test_quantile_difference_of_a_tiny_sample_is_unbounded() -> None:
    i = quantile_difference(np.array([1.0, 2.0]), np.array([1.5, 2.5]), 0.99, 0.95)
    assert i.high == np.inf
    assert i.low == -np.inf
