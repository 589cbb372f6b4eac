"""Anytime-valid intervals: coverage under continuous monitoring, by simulation.

A confidence sequence must cover the truth at EVERY look with probability >= 1 - alpha; a
fixed-sample interval re-checked after every look does not (the peeking inflation), which
these tests also show so that the coverage test is known to be able to fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from abserve.compare.stats.anytime import anytime_ols, mixture_radius, rate_sequence

ALPHA = 0.05


def _monitored_miss(rng: np.random.Generator, *, noise: str, n: int = 320, every: int = 8,
                    bias: float = 0.7) -> tuple[bool, bool]:
    """(anytime missed, fixed t-interval missed) over all looks of one A/A' sequence."""
    contrast = np.tile([0.5, 0.5, -0.5, -0.5], n // 4)
    e = rng.standard_t(3, n) if noise == "t3" else rng.normal(size=n)
    y = bias * contrast + e  # true shift 0, a placement bias that flips sign every block
    x = np.column_stack([np.ones(n), contrast])
    anytime = fixed = False
    for m in range(every, n + 1, every):
        fit = anytime_ols(y[:m], x[:m], ALPHA)
        if fit is not None and not fit.coefficients[0].low <= 0.0 <= fit.coefficients[0].high:
            anytime = True
        sample = y[:m] - bias * contrast[:m]
        half = stats.t.ppf(1 - ALPHA / 2, m - 1) * sample.std(ddof=1) / math.sqrt(m)
        if abs(sample.mean()) > half:
            fixed = True
    return anytime, fixed


@pytest.mark.slow
def test_anytime_ols_covers_the_shift_at_every_look_where_peeking_does_not() -> None:
    rng = np.random.default_rng(7)
    for noise in ("normal", "t3"):
        results = [_monitored_miss(rng, noise=noise) for _ in range(200)]
        anytime = sum(a for a, _ in results) / len(results)
        peeking = sum(f for _, f in results) / len(results)
        assert anytime <= ALPHA, (noise, anytime)
        assert peeking > 3 * ALPHA, (noise, peeking)  # a fixed interval checked 40 times


def test_anytime_ols_separates_shift_and_placement_bias() -> None:
    rng = np.random.default_rng(1)
    n = 400
    contrast = np.tile([1.0, 1.0, -1.0, -1.0], n // 4)
    y = 2.0 + 0.5 * contrast + rng.normal(0, 0.3, n)
    fit = anytime_ols(y, np.column_stack([np.ones(n), contrast]), ALPHA)
    assert fit is not None
    shift, bias = fit.coefficients
    assert shift.low <= 2.0 <= shift.high
    assert bias.low <= 0.5 <= bias.high
    assert shift.high - shift.low < 0.2


def test_anytime_ols_refuses_singular_or_tiny_designs() -> None:
    assert anytime_ols([1.0, 2.0], np.ones((2, 1)), ALPHA) is None
    assert anytime_ols([1.0, 2.0, 3.0, 4.0], np.column_stack([np.ones(4), np.ones(4)]), ALPHA) is None


def test_mixture_radius_shrinks_like_root_log_n_over_n() -> None:
    radii = [mixture_radius(1.0 / math.sqrt(n), float(n), n - 2, ALPHA, 1.0) for n in (50, 200, 800, 3200)]
    assert radii == sorted(radii, reverse=True)
    assert all(r > 1.96 / math.sqrt(n) for r, n in zip(radii, (50, 200, 800, 3200), strict=True))
    assert mixture_radius(1.0, 10.0, 0, ALPHA, 1.0) == math.inf


def test_rate_sequence_one_mismatch_against_zero_is_proof_and_zero_bounds_the_rate() -> None:
    none = [rate_sequence(0, n, ALPHA) for n in (10, 50, 200)]
    assert all(iv.low == 0.0 for iv in none)
    assert [iv.high for iv in none] == sorted((iv.high for iv in none), reverse=True)
    assert none[-1].high < 0.035
    one = rate_sequence(1, 200, ALPHA)
    assert one.low > 0.0
    assert one.high < 0.05
    assert rate_sequence(0, 0, ALPHA).low == 0.0


def test_rate_sequence_covers_the_rate_at_every_look() -> None:
    rng = np.random.default_rng(3)
    misses = 0
    for _ in range(200):
        events = rng.random(300) < 0.1
        k = np.cumsum(events)
        misses += any(not rate_sequence(int(k[n - 1]), n, ALPHA).low <= 0.1 <= rate_sequence(
            int(k[n - 1]), n, ALPHA).high for n in range(10, 301, 10))
    assert misses / 200 <= ALPHA
