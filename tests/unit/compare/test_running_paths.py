"""The running (incremental) look paths equal the from-scratch computation they replace.

``coefficient_path`` (``compare.ols_path``), the look counts (``sequential.counts_before``)
and the quantile sequences (``quantile_cs.quantile_path``, ``accepted_ranges``) were computed
from scratch at every look (O(looks x n)), and MSER's score of every truncation point from
scratch (O(m^2)); each reference below is that old computation, kept here verbatim, and
seeded sweeps and hypothesis hold the fast paths to it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abserve.compare import sequential as sq
from abserve.compare.model import Look
from abserve.compare.quantile_cs import accepted_counts, accepted_ranges, quantile_path, quantile_sequence
from abserve.compare.stats.anytime import anytime_ols
from abserve.compare.stats.interval import Interval
from abserve.compare.stats.ols_path import DIRECT_BELOW, SortedPrefix, running_path
from abserve.compare.warmup import _mser_argmin


def reference_path(design: sq.Design, coefficient: str, alpha: float, phi: float, clip: float) -> list[Look]:
    """``coefficient_path`` as it was: every look fitted from scratch."""
    extra = {"shift": None, "per_item": "items", "drift": "time"}[coefficient]
    y, x, keep = sq._rows(design, extra)
    column = 0 if extra is None else x.shape[1] - 1
    raw, seen = [], []
    for n in design.looks:
        rows = np.flatnonzero(keep[:n])
        ys, _ = sq.winsorize(y[rows], clip)
        fit = anytime_ols(ys, sq._drop_empty(x[rows]), alpha, phi) if len(rows) else None
        if fit is None or column >= len(fit.coefficients):
            first = float(np.mean(y[rows])) if len(rows) and extra is None else math.nan
            raw.append(Interval(first, -math.inf, math.inf))
        else:
            raw.append(fit.coefficients[column if extra is None else len(fit.coefficients) - 1])
        seen.append(len(rows))
    return [Look(n=n, estimate=iv.estimate, low=iv.low, high=iv.high)
            for n, iv in zip(seen, raw, strict=True)]


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-3)


def _design(seed: int) -> sq.Design:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 1500))
    diffs = 0.001 * rng.standard_normal(n) + float(rng.choice([0.0, 0.0005, 0.02]))
    if seed % 5 == 0:
        diffs = np.full(n, 0.001)  # identical differences: a zero residual, fitted directly
    if seed % 7 == 0:
        diffs[rng.integers(0, n, n // 50 + 1)] += 0.05  # interference spikes, winsorized
    names: list[str | None] = ["p0", "p1", "p2", None][: int(rng.integers(1, 5))]
    levels = [names[int(rng.integers(0, len(names)))] for _ in range(n)]
    if seed % 3 == 0:
        levels = [*(["p0"] * (n // 3)), *(["p1"] * (n - n // 3))]  # a placement column empty at first
    items = [None if rng.random() < 0.1 else int(rng.integers(1, 9)) for _ in range(n)]
    times = np.cumsum(rng.exponential(0.1, n)).tolist()
    looks = sorted(set(range(16, n, int(rng.integers(1, 40)))) | {n})
    return sq.Design(diffs.tolist(), levels, items, times, looks)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_coefficient_path_equals_the_fit_from_scratch_at_every_look(seed: int) -> None:
    design = _design(seed)
    for coefficient in ("shift", "per_item", "drift"):
        for clip in (0.0, 2.0, 5.0):
            fast = sq.coefficient_path(design, coefficient, 0.05, 1.0, clip)
            slow = reference_path(design, coefficient, 0.05, 1.0, clip)
            assert [lk.n for lk in fast] == [lk.n for lk in slow]
            for a, b in zip(fast, slow, strict=True):
                assert all(_close(getattr(a, f), getattr(b, f)) for f in ("estimate", "low", "high")), (a, b)


def test_running_path_fits_directly_only_the_small_looks() -> None:
    rng = np.random.default_rng(3)
    y = 0.001 * rng.standard_normal(1000)
    x = np.ones((1000, 1))
    looks = list(range(16, 1001, 16))
    direct: list[int] = []

    def fit_directly(m: int) -> Interval:
        direct.append(m)
        return Interval(math.nan, -math.inf, math.inf)

    path = running_path(y, x, looks, 0, 5.0, 0.05, 1.0, fit_directly)
    assert direct == [m for m in looks if m < DIRECT_BELOW]
    assert all(iv.bounded for iv in path[len(direct):])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=60), st.data())
def test_sorted_prefix_median_and_mad_equal_numpy(values: list[float], data: st.DataObject) -> None:
    y = np.asarray(values)
    looks = [0]
    while looks[-1] < len(y):
        looks.append(data.draw(st.integers(looks[-1] + 1, len(y))))
    prefix = SortedPrefix(y, looks[1:])
    for m in looks[1:]:
        prefix.grow(m)
        centre = prefix.median()
        assert centre == float(np.median(y[:m]))
        assert prefix.median_distance(centre) == float(np.median(np.abs(y[:m] - centre)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=80), st.lists(st.integers(0, 320), max_size=30))
def test_counts_before_equals_the_count_at_each_end(index: list[int], ends: list[int]) -> None:
    expected = sorted({sum(1 for i in index if i < e) for e in ends} - {0})
    assert sq.counts_before(index, ends) == expected


@pytest.mark.parametrize("p", [0.5, 0.95, 0.99])
@pytest.mark.parametrize("alpha", [0.05, 0.025, 0.001])
def test_accepted_ranges_equal_the_full_scan(p: float, alpha: float) -> None:
    ns = [*range(0, 12_000, 37), 4095, 4096, 4097, 60_000]
    assert accepted_ranges(ns, p, alpha) == [accepted_counts(n, p, alpha) for n in ns]


@pytest.mark.parametrize("seed", range(6))
def test_quantile_path_equals_a_sequence_per_look(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.lognormal(size=9000)
    x[::40] = x[1]  # ties
    counts = sorted(set(rng.integers(1, 9000, 150).tolist()) | {9000})
    for p in (0.5, 0.95, 0.99):
        assert quantile_path(x, counts, p, 0.05) == [quantile_sequence(x[:n], p, 0.05) for n in counts]


def _mser_reference(means: np.ndarray, limit: int) -> int:
    return int(np.argmin([float(np.var(means[d:])) / (len(means) - d) for d in range(limit)]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=4, max_size=80), st.floats(0.01, 1.0))
def test_mser_argmin_equals_every_suffix_scored(values: list[float], fraction: float) -> None:
    means = np.asarray(values)
    limit = max(1, int(len(means) * fraction))
    assert _mser_argmin(means, limit) == _mser_reference(means, limit)


@pytest.mark.parametrize("seed", range(20))
def test_mser_argmin_equals_every_suffix_scored_on_warming_series(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(4, 5000))
    means = 0.01 + 0.0004 * rng.standard_normal(m)
    means[: int(rng.integers(0, m // 2 + 1))] += float(rng.choice([0.0, 0.002, 0.05]))  # a cold start
    if seed % 4 == 0:
        means = np.round(means, 3)  # ties among suffixes
    if seed % 5 == 0:
        means[:] = 0.01  # constant: every score zero
    limit = max(1, m // 2)
    assert _mser_argmin(means, limit) == _mser_reference(means, limit)
