"""Paired latency shifts estimated within blocks and combined across placements.

A run on a shared machine is cut into blocks and the arms swap CPU sets between blocks
(``abserve.runs.blocks``). Each exchange carries its ``block`` and ``placement`` tags
(format: ``abserve.model.placement``). The model for the paired difference (candidate -
baseline) of request ``i`` in block ``k``:

    d_ik = delta + beta_p(k) + u_k + e_ik

``delta`` is the effect of the code, ``beta_p`` the bias of the placement ``p`` the pair had in
that block (``sum_p beta_p = 0``: the design puts each arm in each slot equally often),
``u_k ~ N(0, tau^2)`` what else differs between blocks (where the router and the load
generator happened to run), ``e_ik`` the request's own noise. The method:

1. Per block: the Hodges-Lehmann shift ``e_k`` of its pairs and its variance ``v_k`` from the
   width of its signed-rank interval (robust to the heavy tails of latencies). Blocks with
   fewer than ``min_pairs`` pairs are left out (reported).
2. ``tau^2`` by DerSimonian-Laird from the spread of the blocks around their placement's mean
   (method of moments, one-way layout with placement as the factor).
3. Per placement ``mu_p``: the inverse-variance mean of its blocks, weights ``1/(v_k + tau^2)``.
4. Counterbalanced ``delta = mean_p mu_p`` (equal weight per placement whatever the number of
   requests that survived warm-up in each); placement bias ``b_p = mu_p - delta`` (for two
   placements, half their difference). Variances follow from the independent ``mu_p``.
5. Intervals: modified Hartung-Knapp-Sidik-Jonkman -- the variances are scaled by
   ``max(1, q)`` (``q``: weighted residual mean square) and the quantile is Student's t with
   ``K - P`` degrees of freedom (``K`` blocks, ``P`` placements). HKSJ keeps its nominal
   coverage with few blocks where DerSimonian-Laird with a normal quantile does not (IntHout
   et al. 2014; the ``max(1, q)`` floor: Roever et al. 2015). With one block per placement
   there are no degrees of freedom for ``tau``: the interval then assumes ``tau = 0`` and uses
   the normal quantile, and the line says so.

Why not pool every pair into one Hodges-Lehmann interval (the naive estimate, kept beside
this one)? Pooling treats requests as independent when requests of one block share that
block's placement and conditions: when the design is not perfectly balanced (warm-up, an
error, a short block) the bias leaks into the estimate, and when blocks differ (``tau > 0``)
the interval is too narrow. ``tests/unit/compare/test_compare_blocked.py`` checks coverage
by simulation. Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from abserve.compare.stats.paired import hodges_lehmann
from abserve.model.placement import parse_placement

WARMUP_BLOCK = "warmup"  # the orchestrator's warm-up requests, never part of the design


@dataclass(frozen=True)
class LevelEstimate:
    """The shift within one placement: its blocks combined."""

    placement: str
    blocks: int
    n: int
    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class BlockedShift:
    """The counterbalanced shift, the placement bias and how they were obtained."""

    estimate: float
    low: float
    high: float
    bias: float  # b_p of the placement with the largest |b_p|
    bias_low: float
    bias_high: float
    bias_placement: str
    tau: float  # between-block standard deviation beyond placement (seconds)
    df: int  # K - P; 0 = tau not estimable
    n: int
    blocks_used: int
    blocks_dropped: int
    levels: list[LevelEstimate]
    confidence: float


def pair_placement(tags: dict[str, str], baseline: str, candidate: str) -> str | None:
    """The placement of the compared pair in this exchange, e.g. ``a:0,b:1`` (None if untagged)."""
    raw = tags.get("placement")
    if raw is None:
        return None
    try:
        arms = parse_placement(raw)
    except ValueError:
        return None
    if baseline not in arms or candidate not in arms:
        return None
    return f"{baseline}:{arms[baseline]},{candidate}:{arms[candidate]}"


def placements(tags: Iterable[dict[str, str]], baseline: str, candidate: str) -> list[str | None]:
    """``pair_placement`` of each exchange's tags, each distinct placement tag parsed once
    (and each placement one shared string, not one per exchange)."""
    seen: dict[str | None, str | None] = {}
    out = []
    for t in tags:
        raw = t.get("placement")
        if raw not in seen:
            seen[raw] = pair_placement(t, baseline, candidate)
        out.append(seen[raw])
    return out


@dataclass(frozen=True)
class _Block:
    level: str
    n: int
    estimate: float
    var: float


def _block_estimates(diffs: Sequence[float] | np.ndarray, blocks: Sequence[str | None],
                     levels: Sequence[str | None], confidence: float,
                     min_pairs: int) -> tuple[list[_Block], int]:
    groups: dict[tuple[str, str], list[float]] = {}
    for d, b, p in zip(diffs, blocks, levels, strict=True):
        if b is not None and p is not None and b != WARMUP_BLOCK:
            groups.setdefault((b, p), []).append(d)
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    out, dropped = [], 0
    for (_, level), values in groups.items():
        if len(values) < min_pairs:
            dropped += 1
            continue
        iv = hodges_lehmann(values, confidence)
        if not (math.isfinite(iv.low) and math.isfinite(iv.high)):
            dropped += 1
            continue
        se = max((iv.high - iv.low) / (2 * z), 1e-12)
        out.append(_Block(level, len(values), iv.estimate, se * se))
    return out, dropped


def _tau2(blocks: list[_Block], level_of: dict[str, list[_Block]]) -> float:
    """DerSimonian-Laird between-block variance in the one-way (placement) layout."""
    df = len(blocks) - len(level_of)
    if df <= 0:
        return 0.0
    q, denom = 0.0, 0.0
    for members in level_of.values():
        w = np.array([1 / b.var for b in members])
        e = np.array([b.estimate for b in members])
        mean = float((w * e).sum() / w.sum())
        q += float((w * (e - mean) ** 2).sum())
        denom += float(w.sum() - (w**2).sum() / w.sum())
    return max(0.0, (q - df) / denom) if denom > 0 else 0.0


def blocked_shift(diffs: Sequence[float] | np.ndarray, blocks: Sequence[str | None],
                  levels: Sequence[str | None], confidence: float = 0.95,
                  min_pairs: int = 6) -> BlockedShift | None:
    """The counterbalanced shift; None unless at least two placements have a usable block."""
    used, dropped = _block_estimates(diffs, blocks, levels, confidence, min_pairs)
    level_of: dict[str, list[_Block]] = {}
    for b in used:
        level_of.setdefault(b.level, []).append(b)
    if len(level_of) < 2:
        return None
    tau2 = _tau2(used, level_of)
    names = sorted(level_of, key=lambda lv: levels.index(lv))
    mus, variances, resid = [], [], 0.0
    for name in names:
        w = np.array([1 / (b.var + tau2) for b in level_of[name]])
        e = np.array([b.estimate for b in level_of[name]])
        mu = float((w * e).sum() / w.sum())
        mus.append(mu)
        variances.append(1 / float(w.sum()))
        resid += float((w * (e - mu) ** 2).sum())
    k, p = len(used), len(names)
    df = k - p
    if df > 0:
        scale = max(1.0, resid / df)
        quantile = float(sps.t.ppf(0.5 + confidence / 2, df))
    else:
        scale, quantile = 1.0, float(sps.norm.ppf(0.5 + confidence / 2))
    var = np.array(variances) * scale
    mu_arr = np.array(mus)
    delta = float(mu_arr.mean())
    half = quantile * math.sqrt(float(var.sum()) / p**2)
    biases = mu_arr - delta
    worst = int(np.argmax(np.abs(biases)))
    bias_var = (1 - 1 / p) ** 2 * var[worst] + (float(var.sum()) - var[worst]) / p**2
    bias_half = quantile * math.sqrt(float(bias_var))
    level_rows = [
        LevelEstimate(name, len(level_of[name]), sum(b.n for b in level_of[name]), mus[i],
                      mus[i] - quantile * math.sqrt(var[i]), mus[i] + quantile * math.sqrt(var[i]))
        for i, name in enumerate(names)
    ]
    return BlockedShift(
        estimate=delta, low=delta - half, high=delta + half,
        bias=float(biases[worst]), bias_low=float(biases[worst]) - bias_half,
        bias_high=float(biases[worst]) + bias_half, bias_placement=names[worst],
        tau=math.sqrt(tau2), df=df, n=sum(b.n for b in used), blocks_used=k,
        blocks_dropped=dropped, levels=level_rows, confidence=confidence,
    )
