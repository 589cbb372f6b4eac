"""Order statistics of a growing prefix ``values[:m]``, in O(log n) a query and O(sqrt n) a look.

The winsorizing bounds of ``ols_path`` (median, MAD, the rows beyond the bounds) and the
quantile sequences of ``quantile_cs.quantile_path`` need, at every look, order statistics of
the values seen so far. Keeping that prefix as one sorted array grown by ``np.insert`` moves
the whole prefix at each look: quadratic, and at 1,000,000 values looked at every 16 it
dominated ``abserve report`` (benchmarks/scale.md, issue 30).

Every value and every look are known when a path is computed, so here the values are sorted
once, and a prefix is a mask over that full order ("included"), with a running count per block
of ranks (``block_size``). The ``k``-th smallest of the prefix is found by bisection of the block
counts' cumulative sum, then within the block by bisection of ``within``: each rank's count of
included ranks in its block so far (up to itself), offset by ``(block + 1)`` per block so
that the whole array is ascending. A look re-counts only the blocks its new values fall in.

Ties are ordered as the sorted array grown by ``np.insert(searchsorted(...))`` ordered them:
by value, then the later look first, then by position. So the ``k``-th smallest (even the sign
of a zero among ``-0.0`` and ``0.0``) and the positions beyond a bound come out in the same
order as before, and sums over them round the same. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


class PrefixOrder:
    """The first ``size`` of ``values``, ``size`` grown to each of ``looks`` (ascending) in turn."""

    def __init__(self, values: np.ndarray, looks: Sequence[int]) -> None:
        total = int(looks[-1]) if len(looks) else 0
        self.size = 0
        self.order = _tie_order(np.asarray(values[:total], dtype=float), np.asarray(looks, dtype=np.int64))
        self.sorted = np.asarray(values, dtype=float)[self.order]
        self.rank = np.empty(total, dtype=np.int64)
        self.rank[self.order] = np.arange(total)
        self.block = block = block_size(len(looks))
        blocks = -(-total // block)
        self.included = np.zeros((blocks, block), dtype=bool)
        self.offset = (np.arange(blocks, dtype=np.int64) * (block + 1))[:, None]
        self.within = np.repeat(self.offset, block, axis=1)  # (block + 1) * block's index + count so far
        self.flat_included, self.flat_within = self.included.reshape(-1), self.within.reshape(-1)  # views
        self.counts = np.zeros(blocks, dtype=np.int64)
        self.cumulative = np.zeros(blocks, dtype=np.int64)  # included up to each block's end
        self.shift = np.zeros(blocks, dtype=np.int64)  # before each block, less its offset, less 1

    def grow(self, m: int) -> None:
        """Include ``values[size:m]``."""
        if m <= self.size:
            return
        ranks = self.rank[self.size:m]
        self.size = m
        self.flat_included[ranks] = True
        touched = ranks // self.block if ranks.size < len(self.counts) else slice(None)  # repeats: same rows
        self.within[touched] = self.included[touched].cumsum(axis=1) + self.offset[touched]
        self.counts[touched] = self.within[touched, -1] - self.offset[touched, 0]
        self.cumulative = self.counts.cumsum()
        self.shift = self.cumulative - self.counts - self.offset[:, 0] - 1

    def ranks_of(self, ks: np.ndarray) -> np.ndarray:
        """The full order's ranks of the prefix's ``ks``-th smallest (0-based, ``0 <= k < size``):
        in block ``b``, the first rank whose ``within`` reaches ``offset[b] + k - before(b) + 1``."""
        return self.flat_within.searchsorted(ks - self.shift[self.cumulative.searchsorted(ks, side="right")])

    def kth(self, ks: np.ndarray) -> np.ndarray:
        """The prefix's ``ks``-th smallest values (0-based): ``np.sort(values[:size])[ks]``."""
        kth: np.ndarray = self.sorted[self.ranks_of(ks)]
        return kth

    def count_below(self, value: float, side: Literal["left", "right"] = "left") -> int:
        """How many prefix values are ``< value`` (``side="left"``) or ``<= value`` ("right")."""
        end = int(self.sorted.searchsorted(value, side=side))
        block, rest = divmod(end, self.block)
        before = int(self.cumulative[block - 1]) if block else 0
        return before + (int(self.within[block, rest - 1] - self.offset[block, 0]) if rest else 0)

    def positions_below(self, value: float) -> np.ndarray:
        """The positions of the prefix values ``< value``, in the prefix's sorted order."""
        end = int(self.sorted.searchsorted(value, side="left"))
        below: np.ndarray = self.order[:end][self.flat_included[:end]]
        return below

    def positions_above(self, value: float) -> np.ndarray:
        """The positions of the prefix values ``> value``, in the prefix's sorted order."""
        start = int(self.sorted.searchsorted(value, side="right"))
        above: np.ndarray = self.order[start:][self.flat_included[start:self.order.size]]
        return above


def block_size(looks: int) -> int:
    """Ranks per block: a look re-counts the (up to n / looks) blocks its values fall in and
    sums the n / block counts, balanced at ``block ~ sqrt(looks)``; a power of two, 16 to 1024."""
    return int(min(1024, max(16, 2 ** round(np.log2(max(looks, 1)) / 2))))


def _tie_order(values: np.ndarray, looks: np.ndarray) -> np.ndarray:
    """Positions sorted by value, ties by the later look first, then by position.

    Position ``i`` joins at the first look above it; the positions ordered by (later look
    first, position) are the looks' ranges in reverse, and a stable sort of the values keeps
    that order among equal values.
    """
    n = values.size
    ends = np.searchsorted(looks, np.arange(n), side="right")  # the look each position joins at
    look_end, look_start = looks[ends], np.concatenate(([0], looks))[ends]
    placed = (n - look_end) + (np.arange(n) - look_start)  # where each position goes in that order
    by_look = np.empty(n, dtype=np.int64)
    by_look[placed] = np.arange(n)
    return by_look[np.argsort(values[by_look], kind="stable")]


def linear_quantile(prefix: PrefixOrder, p: float) -> float:
    """``float(np.quantile(values[:size], p))`` (method ``linear``), bit for bit, from the two
    neighbouring order statistics: numpy's virtual index ``(n - 1) p``, its ``floor`` and
    weight, and its ``_lerp`` (``a + (b - a) t``, or ``b - (b - a)(1 - t)`` from ``t >= 0.5``)."""
    n = prefix.size
    virtual = np.float64(n - 1) * np.float64(p)
    below = np.floor(virtual)
    last = virtual >= n - 1
    lower = n - 1 if last else int(below)
    a, b, top = prefix.kth(np.array([lower, n - 1 if last else lower + 1, n - 1]))
    if np.isnan(top):
        return float("nan")
    t = virtual - below if not last else virtual - np.float64(-1.0)
    diff = b - a
    return float(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
