"""``compare.prefix_order`` answers what the sorted prefixes grown by ``np.insert`` answered.

The winsorizing bounds of ``ols_path`` and ``quantile_cs.quantile_path`` kept each look's
prefix as one sorted array, new values merged in with ``np.insert`` (quadratic in the run's
size, issue 30). The references below are that old code, kept verbatim; hypothesis holds the
new order to it bit for bit (ties, ``-0.0`` and ``0.0``, duplicates, infinities), and the
order statistics to ``np.sort``.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abserve.compare.quantile_cs import QuantileBounds, accepted_ranges, quantile_path
from abserve.compare.stats import ols_path
from abserve.compare.stats.interval import Interval
from abserve.compare.stats.ols_path import SortedPrefix, first_false, running_path
from abserve.compare.stats.prefix_order import PrefixOrder, linear_quantile


class OldSortedPrefix:
    """``ols_path.SortedPrefix`` as it was (grown by ``np.insert``)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.sorted = np.empty(0)
        self.positions = np.empty(0, dtype=np.int64)

    def grow(self, m: int) -> None:
        start = self.sorted.size
        order = np.argsort(self.values[start:m], kind="stable")
        new = self.values[start:m][order]
        where = np.searchsorted(self.sorted, new)
        self.sorted = np.insert(self.sorted, where, new)
        self.positions = np.insert(self.positions, where, order + start)

    def median(self) -> float:
        m = self.sorted.size
        return float((self.sorted[(m - 1) // 2] + self.sorted[m // 2]) / 2)

    def median_distance(self, centre: float) -> float:
        m = self.sorted.size
        return float((self._kth_distance(centre, (m - 1) // 2) + self._kth_distance(centre, m // 2)) / 2)

    def _kth_distance(self, centre: float, k: int) -> np.float64:
        s = self.sorted
        split = int(np.searchsorted(s, centre))

        def left(j: int) -> np.float64:
            return np.float64(centre - s[split - 1 - j])

        def right(j: int) -> np.float64:
            return np.float64(s[split + j] - centre)

        n_left, n_right = split, s.size - split
        lo, hi = max(0, k + 1 - n_right), min(k + 1, n_left)
        while lo < hi:
            i = (lo + hi) // 2
            if left(i) < right(k - i):
                lo = i + 1
            else:
                hi = i
        taken = [left(lo - 1)] if lo > 0 else []
        taken += [right(k - lo)] if k - lo >= 0 else []
        return max(taken)


class OldPrefixForRunningPath(OldSortedPrefix):
    """The old prefix behind ``running_path``'s new calls (what ``_look_fit`` asked of it before)."""

    def __init__(self, values: np.ndarray, looks: object) -> None:
        super().__init__(values)

    @property
    def size(self) -> int:
        return int(self.sorted.size)

    def positions_below(self, value: float) -> np.ndarray:
        return self.positions[:int(np.searchsorted(self.sorted, value, side="left"))]

    def positions_above(self, value: float) -> np.ndarray:
        return self.positions[int(np.searchsorted(self.sorted, value, side="right")):]


def old_quantile_path(values: np.ndarray, counts: list[int], p: float, alpha: float) -> list[QuantileBounds]:
    """``quantile_cs.quantile_path`` as it was."""
    xs = np.asarray(values, dtype=float)
    ranges = accepted_ranges(counts, p, alpha)
    ordered = np.empty(0)
    path = []
    for n, accepted in zip(counts, ranges, strict=True):
        new = np.sort(xs[ordered.size:n])
        ordered = np.insert(ordered, np.searchsorted(ordered, new), new)
        if n == 0:
            path.append(QuantileBounds(0, math.nan, -math.inf, math.inf))
            continue
        estimate = float(np.quantile(ordered, p))
        if accepted is None:
            path.append(QuantileBounds(n, estimate, -math.inf, math.inf))
            continue
        k_lo, k_hi = accepted
        low = -math.inf if k_lo == 0 else float(ordered[k_lo - 1])
        high = math.inf if k_hi + 1 > n else float(ordered[k_hi])
        path.append(QuantileBounds(n, estimate, low, high))
    return path


def bits(x: float) -> bytes:
    """A float's bytes: ``-0.0`` and ``0.0`` differ, every NaN equals itself."""
    return struct.pack("<d", float("nan") if math.isnan(x) else x)


# ties, both zeros and duplicates are common among these; infinities at the ends
VALUES = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, 1e-300]), st.floats(-1e3, 1e3),
                   st.sampled_from([math.inf, -math.inf]))


@st.composite
def values_and_looks(draw: st.DrawFn, max_size: int = 80) -> tuple[np.ndarray, list[int]]:
    values = np.asarray(draw(st.lists(VALUES, min_size=1, max_size=max_size)), dtype=float)
    looks = sorted(set(draw(st.lists(st.integers(0, len(values)), max_size=20))) | {len(values)})
    return values, looks


@settings(max_examples=300, deadline=None)
@given(values_and_looks())
def test_kth_of_every_prefix_equals_the_sorted_prefix(case: tuple[np.ndarray, list[int]]) -> None:
    values, looks = case
    new, old = PrefixOrder(values, looks), OldSortedPrefix(values)
    for m in looks:
        new.grow(m)
        old.grow(m)
        assert new.size == m
        if m == 0:
            continue
        kth = new.kth(np.arange(m))
        assert kth.tolist() == np.sort(values[:m]).tolist()
        assert [bits(x) for x in kth] == [bits(x) for x in old.sorted]  # the sign of each zero too
        assert new.kth(np.arange(m)[::-1]).tolist() == kth[::-1].tolist()  # any ks, any order


@settings(max_examples=300, deadline=None)
@given(values_and_looks(), st.lists(VALUES, min_size=1, max_size=4))
def test_positions_and_counts_beyond_a_value_equal_the_old_order(case: tuple[np.ndarray, list[int]],
                                                                 cuts: list[float]) -> None:
    values, looks = case
    new, old = PrefixOrder(values, looks), OldSortedPrefix(values)
    for m in looks:
        new.grow(m)
        old.grow(m)
        for cut in cuts:
            assert new.positions_below(cut).tolist() == old.positions[
                :int(np.searchsorted(old.sorted, cut, side="left"))].tolist()
            assert new.positions_above(cut).tolist() == old.positions[
                int(np.searchsorted(old.sorted, cut, side="right")):].tolist()
            for side in ("left", "right"):
                assert new.count_below(cut, side) == int(np.searchsorted(old.sorted, cut, side=side))


def test_a_prefix_of_many_blocks_grown_in_uneven_looks() -> None:
    rng = np.random.default_rng(7)
    values = np.round(rng.standard_normal(20_000), 2)  # many ties
    looks = sorted(set(rng.integers(1, 20_000, 300).tolist()) | {5_000, 20_000})
    new, old = PrefixOrder(values, looks), OldSortedPrefix(values)
    for m in looks:
        new.grow(m)
        old.grow(m)
        ks = rng.integers(0, m, 50)
        assert [bits(x) for x in new.kth(ks)] == [bits(x) for x in old.sorted[ks]]
    assert new.positions_below(0.0).tolist() == old.positions[:int(np.searchsorted(old.sorted, 0.0))].tolist()


@settings(max_examples=300, deadline=None)
@given(values_and_looks(), st.floats(-1e3, 1e3, allow_nan=False))
def test_median_and_mad_equal_the_old_prefix(case: tuple[np.ndarray, list[int]], off: float) -> None:
    values, looks = case
    values = values[np.isfinite(values)]
    looks = sorted({min(m, values.size) for m in looks} - {0})
    new, old = SortedPrefix(values, looks), OldSortedPrefix(values)
    for m in looks:
        new.grow(m)
        old.grow(m)
        assert bits(new.median()) == bits(old.median())
        for centre in (old.median(), off):
            assert bits(new.median_distance(centre)) == bits(old.median_distance(centre))


@settings(max_examples=300, deadline=None)
@given(values_and_looks(max_size=200), st.sampled_from([0.01, 0.3, 0.5, 0.95, 0.99]),
       st.sampled_from([0.05, 0.5]))
def test_quantile_path_equals_the_old_one(case: tuple[np.ndarray, list[int]], p: float, alpha: float) -> None:
    values, looks = case
    new, old = quantile_path(values, looks, p, alpha), old_quantile_path(values, looks, p, alpha)
    for a, b in zip(new, old, strict=True):
        assert a.n == b.n
        same = [bits(a.estimate), bits(a.low), bits(a.high)] == [bits(b.estimate), bits(b.low), bits(b.high)]
        # np.sort and np.quantile's partition may swap -0.0 and 0.0: equal values, another sign
        equal = all(x == y or (math.isnan(x) and math.isnan(y))
                    for x, y in ((a.estimate, b.estimate), (a.low, b.low), (a.high, b.high)))
        assert same or (equal and bool(np.any(values == 0.0)))


@settings(max_examples=500, deadline=None)
@given(st.lists(VALUES | st.just(math.nan), min_size=1, max_size=40),
       st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]), st.floats(0.0, 1.0)))
def test_linear_quantile_is_numpys_bit_for_bit(values: list[float], p: float) -> None:
    xs = np.asarray(values, dtype=float)
    prefix = PrefixOrder(xs, [xs.size])
    prefix.grow(xs.size)
    expected = float(np.quantile(xs, p))
    got = linear_quantile(prefix, p)
    assert bits(got) == bits(expected) or (got == expected and bool(np.any(xs == 0.0)))


@pytest.mark.parametrize("seed", range(8))
def test_running_path_is_the_old_one_bit_for_bit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(100, 3000))
    y = 0.001 * rng.standard_normal(n)
    y[rng.integers(0, n, n // 30 + 1)] += 0.05  # spikes, winsorized
    if seed % 2:
        y = np.round(y, 4)  # ties
    x = np.column_stack([np.ones(n), rng.integers(0, 2, n), np.arange(n) / n])
    looks = sorted(set(range(16, n, int(rng.integers(1, 40)))) | {n})

    def direct(m: int) -> Interval:
        return Interval(float(m), -math.inf, math.inf)

    for column in (0, 2):
        new = running_path(y, x, looks, column, 3.0, 0.05, 1.0, direct)
        monkeypatch.setattr(ols_path, "SortedPrefix", OldPrefixForRunningPath)
        old = running_path(y, x, looks, column, 3.0, 0.05, 1.0, direct)
        monkeypatch.undo()
        assert [[bits(v) for v in (a.estimate, a.low, a.high)] for a in new] == \
            [[bits(v) for v in (a.estimate, a.low, a.high)] for a in old]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 500), st.integers(0, 500), st.integers(0, 500) | st.none())
def test_first_false_finds_the_edge_of_a_monotone_predicate(edge: int, width: int, hint: int | None) -> None:
    lo, hi = 0, width
    assert first_false(lambda i: i < edge, lo, hi, hint) == min(max(edge, lo), hi)
