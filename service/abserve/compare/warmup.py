"""Warm-up that ends when the arms are warm: the initial transient of each arm, detected.

A server that has just started (or was idle while its twin served) is slow for a while:
caches fill, allocators grow, lazily built kernels compile. A fixed count of warm-up requests
may not cover that (measured: one arm's TTFT fell from 5.3 s to 0.9 s over its first image
requests), and judging the transient fails a build for being cold. ``transient_cut`` runs
MSER-5 (White 1997; the rule Hoad, Robinson and Davies 2010 recommend for warm-up detection)
on each compared arm's own latency series per request kind (traffic profile): time per
output token, and time to first token per prompt token (so that requests with more images,
which take longer to prefill, do not look like a transient): the cut ``d``
that minimises the standard error of the mean of what remains, searched over the first
``max_fraction`` of the series. The run is judged from the latest cut of any arm and kind.
Both judgment paths first drop the policy's fixed warm-up (``drop_warmup``); the sequential one
may cut more (``sequential.warmup: auto``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from abserve.compare.latency import RequestLatency
from abserve.compare.policy import Policy
from abserve.model.records import Exchange

BATCH = 5
METRICS = ("ttft", "tpot")
Latencies = Mapping[str, Mapping[str, RequestLatency | None]]


def drop_warmup(exchanges: Iterable[Exchange], policy: Policy) -> tuple[list[Exchange], int]:
    """Exchanges in start order minus the warm-up ones, and how many were dropped."""
    ordered = sorted(exchanges, key=lambda ex: (ex.started_at, ex.request_id))
    if not ordered:
        return [], 0
    cutoff = ordered[0].started_at + policy.warmup_seconds
    kept = [ex for i, ex in enumerate(ordered) if i >= policy.warmup_requests and ex.started_at >= cutoff]
    return kept, len(ordered) - len(kept)


def fixed_warmup(ordered: list[Exchange], policy: Policy) -> tuple[list[Exchange], str]:
    """The exchanges after the policy's fixed warm-up, and that sentence for the report."""
    kept, fixed = drop_warmup(ordered, policy)
    return kept, f"first {fixed} exchanges cut (fixed warm-up)"


@dataclass(frozen=True)
class Cut:
    """Where the transient ends: the first judged exchange index, and which series said so."""

    index: int
    arm: str | None = None
    kind: str | None = None
    metric: str | None = None


def mser_cut(series: Sequence[float] | np.ndarray, max_fraction: float = 0.5, batch: int = BATCH,
             z: float = 3.5) -> int:
    """MSER-``batch`` truncation point of ``series`` (in observations, a multiple of ``batch``).

    MSER alone also cuts stationary noise now and then (the variance of a short remainder can
    be small by chance), so a cut stands only when what it removes is a real transient: the
    removed batches are slower: their mean lies more than ``z`` standard errors (of the
    remainder's batch means) above the remainder's mean (a warming arm is slow, then fast).
    """
    m = len(series) // batch
    if m < 4:
        return 0
    means = np.asarray(series[: m * batch], dtype=float).reshape(m, batch).mean(axis=1)
    limit = max(1, int(m * max_fraction))
    d = _mser_argmin(means, limit)
    if d == 0:
        return 0
    rest = means[d:]
    spread = float(np.std(rest, ddof=1)) if len(rest) > 1 else 0.0
    gap = float(np.mean(means[:d])) - float(np.mean(rest))
    return d * batch if gap > z * spread / np.sqrt(d) + 1e-12 else 0


def _mser_argmin(means: np.ndarray, limit: int) -> int:
    """``argmin([np.var(means[d:]) / (m - d) for d in range(limit)])`` in O(m), not O(m * limit).

    The scores come from running sums of the suffixes (centred on the median, so the variance
    loses little to cancellation); the few ``d`` within rounding of the least are then scored
    exactly as above, first to last, so the same ``d`` is chosen, ties included.
    """
    m = len(means)
    centred = means - float(np.median(means))
    sizes = np.arange(m, 0, -1, dtype=float)[:limit]  # m - d
    sums = np.cumsum(centred[::-1])[::-1][:limit]
    squares = np.cumsum((centred * centred)[::-1])[::-1][:limit]
    fast = (squares / sizes - (sums / sizes) ** 2) / sizes
    if not np.all(np.isfinite(fast)):  # a NaN or inf: score every suffix as numpy does
        return int(np.argmin([float(np.var(means[d:])) / (m - d) for d in range(limit)]))
    slack = 1e-6 * abs(float(fast.min())) + 1e-9 * float(np.max(squares / sizes / sizes))
    best, best_score = 0, math.inf
    for d in np.flatnonzero(fast <= float(fast.min()) + slack):
        score = float(np.var(means[d:])) / (m - d)
        if score < best_score:
            best, best_score = int(d), score
        if score == 0.0:
            break
    return best


def transient_cut(exchanges: Sequence[Exchange], lat: Latencies, arms: Sequence[str],
                  max_fraction: float) -> Cut:
    """The latest end of an initial transient over ``arms``, kinds and ``METRICS``."""
    best = Cut(0)
    codes: dict[str, int] = {}
    kind_of = np.fromiter((codes.setdefault(ex.tags.get("profile", "untagged"), len(codes))
                           for ex in exchanges), dtype=np.int64, count=len(exchanges))
    series = {(arm, metric): _series(exchanges, lat, arm, metric) for arm in arms for metric in METRICS}
    for kind in sorted(codes):
        inside = kind_of == codes[kind]
        for arm in arms:
            for metric in METRICS:
                values, ok = series[arm, metric]
                positions = np.flatnonzero(inside & ok)
                d = mser_cut(values[positions], max_fraction)
                if 0 < d < len(positions) and positions[d] > best.index:
                    best = Cut(int(positions[d]), arm, kind, metric)
    return best


def _series(exchanges: Sequence[Exchange], lat: Latencies, arm: str,
            metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``_value`` at every exchange (0 where None) and where it is not None; from a digest's
    columns where ``lat`` reads them (``slim.RunLatencies.arm_series``)."""
    reader = getattr(lat, "arm_series", None)
    got = reader(exchanges, metric, arm, metric == "ttft") if reader is not None else None
    if got is not None:
        return cast(tuple[np.ndarray, np.ndarray], got)
    values, ok = np.zeros(len(exchanges)), np.zeros(len(exchanges), dtype=bool)
    for i, ex in enumerate(exchanges):
        if (v := _value(ex, lat, arm, metric)) is not None:
            values[i], ok[i] = v, True
    return values, ok


def _value(exchange: Exchange, lat: Latencies, arm: str, metric: str) -> float | None:
    """The arm's ``metric`` for this exchange; TTFT per prompt token when the usage says."""
    rl = lat.get(exchange.request_id, {}).get(arm)
    value = None if rl is None else rl.get(metric)
    if value is None or metric != "ttft":
        return value
    outcome = exchange.arms.get(arm)
    prompt = (outcome.usage or {}).get("prompt_tokens") if outcome is not None else None
    return value / prompt if prompt else value


def describe(cut: Cut, fixed: int) -> str:
    """One sentence for the report: what was cut and why."""
    if cut.index <= fixed:
        return f"first {fixed} exchanges cut (fixed warm-up); no longer transient detected"
    return (f"first {cut.index} exchanges cut: arm {cut.arm}'s {cut.metric} on {cut.kind} requests was "
            f"still settling until then (MSER-5); the fixed warm-up was {fixed}")


def detected_warmup(ordered: list[Exchange], lat: Latencies, policy: Policy) -> tuple[list[Exchange], str]:
    """The exchanges after the fixed warm-up and the compared arms' initial transient, and why."""
    _, fixed = drop_warmup(ordered, policy)
    arms = [policy.arms.baseline, policy.arms.candidate]
    cut = transient_cut(ordered, lat, arms, policy.sequential.max_warmup_fraction)
    return ordered[max(fixed, cut.index):], describe(cut, fixed)
