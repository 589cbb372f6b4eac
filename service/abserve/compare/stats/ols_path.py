"""One coefficient's anytime-valid interval at every look, from running sums (O(n log n) in all).

``abserve.compare.sequential.coefficient_path`` fits, at each look, the winsorized paired
differences of the first ``n`` pairs; refitted from scratch that is O(looks x n), and a long
run looks every 16 exchanges. Here the fit of a look comes from the previous look's sums:

- the winsorizing bounds (median and MAD of the prefix) are order statistics of the prefix
  (``prefix_order``: the values sorted once, a look marks its new ones in that order); the
  MAD, the median distance to the median, is a selection in two sorted runs (the values
  below the median, and above it), searched 64 candidates a round from the last look's;
- ``X'X``, ``X'z`` and ``z'z`` (``z = y - c``, ``c`` one constant for the whole path, so the
  residual sum of squares suffers no cancellation) grow by the new rows; the few winsorized
  rows of a look are corrected for, found at the ends of the prefix's order.

The same numbers as the direct fit up to rounding (property tests hold them to it). A look
whose residual sum of squares is a tiny part of ``z'z`` (where rounding in it would matter,
e.g. identical differences) is fitted directly, like any look too small for the sums. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from abserve.compare.stats.anytime import OlsFit, fit_from_moments
from abserve.compare.stats.interval import Interval
from abserve.compare.stats.prefix_order import PrefixOrder

DIRECT_BELOW = 64  # looks of fewer pairs are fitted directly (cheap, and where rounding is largest)
RSS_FLOOR = 1e-6  # a residual sum of squares below this share of z'z is recomputed directly


class SortedPrefix(PrefixOrder):
    """The first ``m`` values in order (``prefix_order``), with ``winsorize``'s median and MAD."""

    def __init__(self, values: np.ndarray, looks: Sequence[int]) -> None:
        super().__init__(values, looks)
        self.hint: int | None = None  # the last look's split of the MAD (it moves little)

    def median(self) -> float:
        """``float(np.median(values[:m]))``: the mean of the two middle values (one when odd)."""
        m = self.size
        low, high = self.kth(np.array([(m - 1) // 2, m // 2]))
        return float((low + high) / 2)

    def median_distance(self, centre: float) -> float:
        """``float(np.median(np.abs(values[:m] - centre)))`` without the O(m) pass."""
        m, split = self.size, self.count_below(centre)
        low = self._kth_distance(centre, split, (m - 1) // 2)
        high = low if m % 2 else self._kth_distance(centre, split, m // 2)
        return float((low + high) / 2)

    def _kth_distance(self, centre: float, split: int, k: int) -> np.float64:
        """The ``k``-th smallest (0-based) of ``|v - centre|``: two sorted runs (the ``split``
        values below the centre, their distances descending, and the rest), merged by
        bisection: ``i`` of the ``k + 1`` smallest distances are below the centre."""

        def left_smaller(i: np.ndarray) -> np.ndarray:
            ends = self.kth(np.concatenate((split - 1 - i, split + k - i)))
            return np.asarray(centre - ends[:i.size] < ends[i.size:] - centre)

        lo = first_false(left_smaller, max(0, k + 1 - (self.size - split)), min(k + 1, split), self.hint)
        self.hint = lo
        below, above = self.kth(np.array([max(split - lo, 0), min(split + k - lo, self.size - 1)]))
        taken = [np.float64(centre - below)] if lo > 0 else []
        taken += [np.float64(above - centre)] if k - lo >= 0 else []
        return max(taken)


SPREAD = 64  # a search's candidates per round (one vectorized look-up each)


def first_false(holds: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, hint: int | None) -> int:
    """The first ``i`` in ``[lo, hi)`` where ``holds`` (true, then false) is false; ``hi`` if none.

    ``SPREAD`` candidates a round, the first round around ``hint`` where one is given.
    """
    while lo < hi:
        if hi - lo <= SPREAD:
            candidates = np.arange(lo, hi)
        elif hint is not None:
            start = min(max(lo, hint - SPREAD // 2), hi - SPREAD)
            candidates, hint = np.arange(start, start + SPREAD), None
        else:
            candidates = lo + np.arange(SPREAD) * (hi - lo) // SPREAD
        true = int(np.count_nonzero(holds(candidates)))
        if true:
            lo = int(candidates[true - 1]) + 1
        if true < candidates.size:
            hi = int(candidates[true])
    return lo


def winsor_bounds(prefix: SortedPrefix, clip: float) -> tuple[float, float] | None:
    """``sequential.winsorize``'s bounds for the prefix; None when it clips nothing by rule."""
    if clip <= 0 or prefix.size < 4:
        return None
    centre = prefix.median()
    scale = 1.4826 * prefix.median_distance(centre)
    if scale <= 0:
        return None
    return centre - clip * scale, centre + clip * scale


Direct = Callable[[int], Interval]


def running_path(y: np.ndarray, x: np.ndarray, looks: Sequence[int], column: int, clip: float,
                 alpha: float, phi: float, direct: Direct) -> list[Interval]:
    """Coefficient ``column`` at each look of ``m`` rows of ``(y, x)`` (``m`` ascending); with
    ``column > 0`` the last kept column, once every column is kept (``coefficient_path``'s rule).

    ``direct(m)`` is the direct fit of a look, used where the running sums are not (small
    looks, singular or degenerate designs).
    """
    prefix = SortedPrefix(y, looks)
    shift = float(np.median(y)) if len(y) else 0.0
    z = y - shift
    p = x.shape[1]
    gram, xz, zz, nonzero = np.zeros((p, p)), np.zeros(p), 0.0, np.zeros(p, dtype=bool)
    done, out = 0, []
    for m in looks:
        rows, zs = x[done:m], z[done:m]
        gram, xz, zz = gram + rows.T @ rows, xz + rows.T @ zs, zz + float(zs @ zs)
        nonzero |= np.any(rows != 0.0, axis=0)
        prefix.grow(m)
        done = m
        fit = None
        if m >= DIRECT_BELOW:
            fit = _look_fit(prefix, x, z, (gram, xz, zz, nonzero), (shift, clip, alpha, phi))
        if fit is None or column >= len(fit.coefficients):
            out.append(direct(m))
        else:
            out.append(fit.coefficients[0 if column == 0 else len(fit.coefficients) - 1])
    return out


def _look_fit(prefix: SortedPrefix, x: np.ndarray, z: np.ndarray,
              sums: tuple[np.ndarray, np.ndarray, float, np.ndarray],
              how: tuple[float, float, float, float]) -> OlsFit | None:
    """The look's fit from the running sums, winsorized rows corrected for; None: fit directly."""
    gram, xz, zz, nonzero = sums
    shift, clip, alpha, phi = how
    bounds = winsor_bounds(prefix, clip)
    if bounds is not None:
        low, high = bounds
        below, above = prefix.positions_below(low), prefix.positions_above(high)
        for rows, bound in ((below, low - shift), (above, high - shift)):
            if rows.size:
                excess = z[rows] - bound
                xz = xz - x[rows].T @ excess
                zz -= float(z[rows] @ z[rows]) - rows.size * bound * bound
    keep = [j for j in range(len(xz)) if j == 0 or nonzero[j]]
    gram, xz = gram[np.ix_(keep, keep)], xz[keep]
    fit = fit_from_moments(gram, xz, lambda beta: zz - float(beta @ xz), prefix.size, alpha, phi,
                           min_rss=RSS_FLOOR * zz)
    if fit is None:
        return None
    first = fit.coefficients[0]
    return OlsFit(fit.n, (Interval(first.estimate + shift, first.low + shift, first.high + shift),
                          *fit.coefficients[1:]), fit.sigma)
