"""Sequential latency gates: judged at every look, valid however the run stopped.

A look is the end of a round of load: ``rotations`` consecutive blocks, so every look sees
each placement equally often (``abserve.runs.blocks``); exchanges that carry no block tags
(the by-hand flow) are looked at every ``policy.sequential.look_every`` exchanges. At each
look the paired differences ``candidate - baseline`` are fitted with a linear model:

- the *shift*: an intercept with effect-coded placement columns, so the intercept is the
  average over placements of each placement's mean shift (counterbalanced) and each placement
  column is that placement's bias;
- the *cost per item*: the same model plus items per request (centred): its slope;
- the *drift*: the same model plus time (scaled to the judged span): how much the shift
  moved from the first judged exchange to the last;
- an *improvement* claim: the shift on the stratum of requests with at least ``min_items``.

Every coefficient carries an anytime-valid interval (``abserve.compare.stats.anytime``) at every
look; the trajectory of every look is kept for the report. Each look is valid on its own, so
a run may stop at the first look that decides; the intervals are not intersected over looks
(an intersection keeps an early narrow interval after the noise grew, which misleads when
the machine's load changes mid-run). Before fitting, each look's differences are winsorized
at ``clip`` robust standard deviations (1.4826 MAD) around their median: another process that
lands on the shared core stalls one arm's step at random and makes a spike of tens of
milliseconds that is no property of either build (the percentile gates still see the tails).
Only ``pass`` and ``fail`` are decisions; a run stops when every critical gate has one. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abserve.compare.blocked import placements
from abserve.compare.latency import PairedSample
from abserve.compare.model import Look
from abserve.compare.stats.anytime import anytime_ols
from abserve.compare.stats.interval import Interval
from abserve.compare.stats.ols_path import running_path
from abserve.model.records import Exchange


@dataclass(frozen=True)
class Design:
    """The paired differences of one gate in judged order, and what each pair carries."""

    diffs: Sequence[float] | np.ndarray
    levels: list[str | None]
    items: list[int | None]
    times: Sequence[float] | np.ndarray
    looks: list[int]  # number of pairs seen at each look (ascending, last == len(diffs))


def look_ends(exchanges: Sequence[Exchange], rotations: int, look_every: int) -> list[int]:
    """Exchange counts (in judged order) at which a look happens; the last is always all.

    With block tags a look follows every ``rotations`` blocks (a whole round); without,
    every ``look_every`` exchanges.
    """
    n = len(exchanges)
    ends: list[int] = []
    blocks = [_block_number(ex) for ex in exchanges]
    if any(b is not None for b in blocks):
        round_of = [None if b is None else b // max(rotations, 1) for b in blocks]
        for i in range(1, n):
            if round_of[i] is not None and round_of[i] != round_of[i - 1]:
                ends.append(i)
    else:
        ends = list(range(look_every, n, look_every))
    return [e for e in ends if 0 < e < n] + ([n] if n else [])


def _block_number(ex: Exchange) -> int | None:
    raw = ex.tags.get("block")
    return int(raw) if raw is not None and raw.isdigit() else None


def design_of(sample: PairedSample, exchanges: Sequence[Exchange], baseline: str, candidate: str,
              ends: Sequence[int]) -> Design:
    """Align a paired sample (drawn from ``exchanges``) with its placements, times and the
    looks (in exchange counts)."""
    levels = placements((ex.tags for ex in sample.paired()), baseline, candidate)
    times = np.fromiter((ex.started_at for ex in sample.paired()), dtype=np.float64, count=len(sample.index))
    return Design(sample.diffs, levels, sample.items, times, counts_before(sample.index, ends))


def counts_before(index: Sequence[int] | np.ndarray, ends: Sequence[int]) -> list[int]:
    """The distinct nonzero counts of ``index`` entries below each of ``ends``, ascending.

    ``sorted({sum(1 for i in index if i < e) for e in ends} - {0})`` in O((n + looks) log n).
    """
    counts = np.searchsorted(np.sort(np.asarray(index, dtype=np.int64)), np.asarray(ends, dtype=np.int64))
    return sorted({int(c) for c in counts} - {0})


def _effect_columns(levels: Sequence[str | None]) -> tuple[np.ndarray, list[str]]:
    """Effect-coded placement columns (sum to zero over placements); no column for one level."""
    names = sorted({lv for lv in levels if lv is not None})
    if len(names) < 2:
        return np.zeros((len(levels), 0)), names
    cols = np.zeros((len(levels), len(names) - 1))
    for row, lv in enumerate(levels):
        if lv is None:
            continue
        j = names.index(lv)
        if j == len(names) - 1:
            cols[row, :] = -1.0
        else:
            cols[row, j] = 1.0
    return cols, names


def _rows(design: Design, extra: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, X, keep): the model's response, columns and which pairs it uses."""
    keep = np.array([
        (extra != "items" or it is not None) for it in design.items
    ], dtype=bool)
    y = np.asarray(design.diffs, dtype=float)
    placement, _ = _effect_columns(design.levels)
    columns = [np.ones(len(y)), *placement.T]
    if extra == "items":
        items = np.array([float(it) if it is not None else np.nan for it in design.items])
        centre = float(np.nanmean(items[keep])) if keep.any() else 0.0
        columns.append(np.where(keep, items - centre, 0.0))
    elif extra == "time":
        t = np.asarray(design.times, dtype=float)
        span = float(t.max() - t.min()) if len(t) else 0.0
        columns.append((t - t.mean()) / span if span > 0 else np.zeros(len(t)))
    return y, np.column_stack(columns), keep


def winsorize(y: np.ndarray, clip: float) -> tuple[np.ndarray, int]:
    """``y`` with values beyond ``clip`` robust sds of the median pulled to that bound; how many."""
    if clip <= 0 or len(y) < 4:
        return y, 0
    centre = float(np.median(y))
    scale = 1.4826 * float(np.median(np.abs(y - centre)))
    if scale <= 0:
        return y, 0
    low, high = centre - clip * scale, centre + clip * scale
    return np.clip(y, low, high), int(np.sum((y < low) | (y > high)))


def coefficient_path(design: Design, coefficient: str, alpha: float, phi: float,
                     clip: float = 0.0) -> list[Look]:
    """The anytime-valid interval of one coefficient at every look.

    ``coefficient``: ``shift`` (the intercept), ``per_item`` (the items slope) or ``drift``
    (the change over the judged span).
    """
    extra = {"shift": None, "per_item": "items", "drift": "time"}[coefficient]
    y, x, keep = _rows(design, extra)
    column = 0 if extra is None else x.shape[1] - 1
    kept = np.flatnonzero(keep)
    seen = [int(c) for c in np.searchsorted(kept, np.asarray(design.looks, dtype=np.int64))]

    def direct(m: int) -> Interval:
        return _direct_look(y[kept[:m]], x[kept[:m]], column, extra is None, (alpha, phi, clip))

    raw = running_path(y[kept], x[kept], seen, column, clip, alpha, phi, direct)
    return [Look(n=n, estimate=iv.estimate, low=iv.low, high=iv.high)
            for n, iv in zip(seen, raw, strict=True)]


def _direct_look(y: np.ndarray, x: np.ndarray, column: int, shift: bool,
                 how: tuple[float, float, float]) -> Interval:
    """One look fitted from scratch on its rows (the reference ``running_path`` stands for)."""
    alpha, phi, clip = how
    ys, _ = winsorize(y, clip)
    fit = anytime_ols(ys, _drop_empty(x), alpha, phi) if len(y) else None
    if fit is None or column >= len(fit.coefficients):
        first = float(np.mean(y)) if len(y) and shift else math.nan
        return Interval(first, -math.inf, math.inf)
    return fit.coefficients[column if shift else len(fit.coefficients) - 1]


def _drop_empty(x: np.ndarray) -> np.ndarray:
    """Placement columns that are all zero at an early look (one placement seen) are dropped."""
    keep = [j for j in range(x.shape[1]) if j == 0 or np.any(x[:, j] != 0.0)]
    return x[:, keep]


def placement_biases(design: Design, alpha: float, phi: float,
                     clip: float = 0.0) -> dict[str, Interval]:
    """Each placement's bias (its mean shift minus the counterbalanced shift), on all pairs."""
    y, x, _ = _rows(design, None)
    y, _ = winsorize(y, clip)
    _, names = _effect_columns(design.levels)
    fit = anytime_ols(y, x, alpha, phi)
    if fit is None or len(names) < 2:
        return {}
    biases = {name: fit.coefficients[j + 1] for j, name in enumerate(names[:-1])}
    last = -sum(iv.estimate for iv in biases.values())
    biases[names[-1]] = Interval(last, -math.inf, math.inf)
    return biases


def stratum(design: Design, min_items: int) -> Design:
    """The pairs of requests with at least ``min_items`` items, with the looks re-counted."""
    chosen = np.fromiter((i for i, it in enumerate(design.items) if it is not None and it >= min_items),
                         dtype=np.int64)
    looks = counts_before(chosen, design.looks)
    picked = chosen.tolist()
    return Design(np.asarray(design.diffs, dtype=np.float64)[chosen], [design.levels[i] for i in picked],
                  [design.items[i] for i in picked], np.asarray(design.times, dtype=np.float64)[chosen],
                  looks if len(chosen) else [])
