"""Anytime-valid tail gates: quantile confidence sequences, so p95/p99 may stop a sequential run.

A percentile gate judged with an ordinary (bootstrap) interval after every round inflates its
false alarms like any fixed-sample interval; judged once at the end, it can never stop a run.
Here each arm's quantile gets a *confidence sequence* (Howard & Ramdas, "Sequential estimation
of quantiles with applications to A/B-testing and best-arm identification", Bernoulli 2022,
Theorem 1): for the ``p``-quantile ``q`` of a continuous distribution the indicators
``1{X_i <= q}`` are i.i.d. Bernoulli(``p``), so the beta-binomial mixture martingale of their
count ``k_t(q)`` at rate ``p`` stays below ``1/alpha`` at every ``t`` with probability at
least ``1 - alpha`` (Ville's inequality). The values ``q`` it does not reject form an interval
between two order statistics, valid at every look at once.

**Paired by default, two-sample on request.** abserve's traffic is mixed (long prompts, a few
images, hundreds of images): each arm's own p95 spans profiles, and the interval of a
difference of two marginal quantiles (``two-sample``: each arm's sequence at ``alpha / 2``,
``[L_c - U_b, U_c - L_b]``, valid under any dependence between the arms by the union bound)
is wider than any useful allowance for hundreds of requests, and has no upper bound before
~80 requests per arm for p95, ~400 for p99. The pairs remove that heterogeneity: a ``paired``
tail line (``compare.tail_gate``) shows the ``p``-quantile of ``c_i - b_i`` with its sequence
here, and decides on the net share of requests slowed beyond their own allowance
(``compare.slowed_share``, issue 58: noise is not slowdown). ``spread_decision`` (the
``p``-quantile of each request's slowdown beyond its allowance, ``e_i = c_i - b_i - max(r b_i,
a)``, proven above zero and spread over the run) is the decision it replaced, kept for the
benchmarks that compare the two (``benchmarks/tails.py``, ``strata.py``, ``by_hand_tails.py``).
What it does not gate is "the candidate's p99 against the baseline's p99" on mixed traffic:
``two-sample`` does that, at its cost. No winsorizing (the tail is the point), no placement
model (the pairs share the instant and the core).

The mixture prior is Beta(``s * p``, ``s * (1 - p)``), centred on ``p``; ``s`` = ``STRENGTH``
tunes it; 1 gave the earliest upper bound of 1, 4 and 20 (benchmarks/strata.md). An upper bound
exists only once ``p ** n`` is below about the sequence's alpha: at alpha = 0.05, paired p95
from 64 pairs (p99 from 305); two-sample p95 from 77 per arm (p99 from ~370). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln

from abserve.compare.latency import RequestLatency
from abserve.compare.stats.prefix_order import PrefixOrder, linear_quantile

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]

STRENGTH = 1.0  # prior Beta(s p, s (1 - p)): the earliest upper bound of 1, 4, 20 (benchmarks/strata.md)


@dataclass(frozen=True)
class QuantileBounds:
    """One arm's ``p``-quantile: the sample quantile and its anytime-valid interval."""

    n: int
    estimate: float
    low: float  # -inf: not yet bounded below
    high: float  # inf: not yet bounded above


def accepted_counts(n: int, p: float, alpha: float, strength: float = STRENGTH) -> tuple[int, int] | None:
    """The counts ``k`` (of ``n`` values at or below ``q``) the mixture does not reject at rate ``p``.

    The log mixture is convex in ``k``, so the accepted counts are one range ``(k_lo, k_hi)``;
    None when every count is rejected (impossible for a valid ``alpha < 1``).
    """
    log_m = _log_mixture_at(np.arange(n + 1, dtype=float), np.float64(n), p, strength)
    ok = np.flatnonzero(log_m < math.log(1.0 / alpha))
    if ok.size == 0:
        return None
    return int(ok[0]), int(ok[-1])


def quantile_sequence(values: Sequence[float] | np.ndarray, p: float, alpha: float,
                      strength: float = STRENGTH) -> QuantileBounds:
    """The anytime-valid interval of the ``p``-quantile after the values seen so far.

    ``q`` is accepted when ``k(q) = #{x <= q}`` is an accepted count, i.e. for
    ``x_(k_lo) <= q < x_(k_hi + 1)`` (order statistics, 1-based; ``x_(0) = -inf``,
    ``x_(n+1) = inf``).
    """
    xs = np.sort(np.asarray(values, dtype=float))
    n = int(xs.size)
    if n == 0:
        return QuantileBounds(0, math.nan, -math.inf, math.inf)
    estimate = float(np.quantile(xs, p))
    counts = accepted_counts(n, p, alpha, strength)
    if counts is None:
        return QuantileBounds(n, estimate, -math.inf, math.inf)
    return _bounds(n, estimate, counts, xs.__getitem__)


def _bounds(n: int, estimate: float, counts: tuple[int, int],
            kth: Callable[[np.ndarray], np.ndarray]) -> QuantileBounds:
    """The bounds of accepted ``counts`` over ``n`` values whose ``k``-th smallest are ``kth(k)``."""
    k_lo, k_hi = counts
    low_v, high_v = kth(np.array([max(k_lo - 1, 0), min(k_hi, n - 1)]))
    low = -math.inf if k_lo == 0 else float(low_v)
    high = math.inf if k_hi + 1 > n else float(high_v)
    return QuantileBounds(n, estimate, low, high)


def quantile_path(values: Sequence[float] | np.ndarray, counts: Sequence[int], p: float, alpha: float,
                  strength: float = STRENGTH) -> list[QuantileBounds]:
    """``[quantile_sequence(values[:n], p, alpha) for n in counts]`` (``counts`` ascending), with
    the prefix's order statistics kept as it grows (``prefix_order``) instead of sorted again."""
    xs = np.asarray(values, dtype=float)
    ranges = accepted_ranges(counts, p, alpha, strength)
    prefix = PrefixOrder(xs, counts)
    path = []
    for n, accepted in zip(counts, ranges, strict=True):
        prefix.grow(n)
        if n == 0:
            path.append(QuantileBounds(0, math.nan, -math.inf, math.inf))
            continue
        estimate = linear_quantile(prefix, p)
        path.append(QuantileBounds(n, estimate, -math.inf, math.inf) if accepted is None
                    else _bounds(n, estimate, accepted, prefix.kth))
    return path


EXACT_SCAN = 4096  # below this many values ``accepted_ranges`` scans every count, as ``accepted_counts``


def _log_mixture_at(k: np.ndarray, n: np.ndarray | float, p: float, strength: float) -> np.ndarray:
    """``accepted_counts``'s log mixture, element by element (the same operations, the same floats)."""
    a, b = strength * p, strength * (1.0 - p)
    mix: np.ndarray = betaln(a + k, b + n - k) - betaln(a, b) - (k * math.log(p) + (n - k) * math.log1p(-p))
    return mix


def accepted_ranges(ns: Sequence[int], p: float, alpha: float,
                    strength: float = STRENGTH) -> list[tuple[int, int] | None]:
    """``accepted_counts(n, ...)`` for every ``n`` of ``ns``, in O(log n) each for large ``n``.

    The log mixture is convex in ``k``, so the accepted counts below and above an accepted
    centre are found by bisection (all ``ns`` at once); a small ``n``, or one whose centre
    ``round(p n)`` is not accepted, is scanned in full.
    """
    out: list[tuple[int, int] | None] = [None] * len(ns)
    big = [j for j, n in enumerate(ns) if n >= EXACT_SCAN]
    for j, n in enumerate(ns):
        if n < EXACT_SCAN:
            out[j] = accepted_counts(n, p, alpha, strength)
    if not big:
        return out
    level = math.log(1.0 / alpha)
    sizes = np.array([ns[j] for j in big], dtype=float)
    centre = np.clip(np.round(p * sizes), 0, sizes)
    inside = _log_mixture_at(centre, sizes, p, strength) < level
    first = _bisect(np.zeros_like(sizes), centre, sizes, (p, strength, level), last=False)
    last = _bisect(centre, sizes, sizes, (p, strength, level), last=True)
    for i, j in enumerate(big):
        out[j] = (int(first[i]), int(last[i])) if inside[i] else accepted_counts(ns[j], p, alpha, strength)
    return out


def _bisect(low: np.ndarray, high: np.ndarray, n: np.ndarray, shape: tuple[float, float, float],
            last: bool) -> np.ndarray:
    """Element by element, the first accepted count in ``[low, high]`` (``high`` accepted) or,
    with ``last``, the last one (``low`` accepted). ``shape``: (p, strength, log level)."""
    p, strength, level = shape

    def ok(k: np.ndarray) -> np.ndarray:
        return np.asarray(_log_mixture_at(k, n, p, strength) < level)

    lo, hi = low.copy(), high.copy()
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2)
        accepted = ok(mid)
        moves_low = accepted if last else ~accepted
        lo, hi = np.where(moves_low, mid, lo), np.where(moves_low, hi, mid)
    if last:
        return np.where(ok(hi), hi, lo)
    return np.where(ok(lo), lo, hi)


@dataclass(frozen=True)
class TailDifference:
    """``q_c - q_b`` with its anytime-valid interval, and both arms' own sequences."""

    baseline: QuantileBounds
    candidate: QuantileBounds

    @property
    def estimate(self) -> float:
        return self.candidate.estimate - self.baseline.estimate

    @property
    def low(self) -> float:
        return self.candidate.low - self.baseline.high

    @property
    def high(self) -> float:
        return self.candidate.high - self.baseline.low


def tail_difference(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, p: float,
                    alpha: float) -> TailDifference:
    """Two-sample difference of ``p``-quantiles, each arm's sequence at ``alpha / 2``."""
    return TailDifference(quantile_sequence(baseline, p, alpha / 2),
                          quantile_sequence(candidate, p, alpha / 2))


def tail_decision(diff: TailDifference, relative: float, absolute: float,
                  direction: str = "increase", margin: float = 0.0) -> str:
    """``fail``, ``pass`` or ``open`` for an allowed increase of ``max(relative * q_b, absolute)``;
    a fail must also clear ``margin`` beyond it (an unknown placement's bias).

    The allowance is taken at the end of the baseline's sequence that makes each decision
    hardest, so it holds for the true ``q_b`` whenever the sequences cover.
    """
    b, c = diff.baseline, diff.candidate
    if direction == "decrease":  # mirrored: the candidate must not be lower by more than allowed
        worse = c.high < b.low - max(relative * abs(b.low), absolute) - margin
        within = c.low >= b.high - max(relative * abs(b.high), absolute)
    else:
        worse = c.low - b.high > max(relative * abs(b.high), absolute) + margin \
            if math.isfinite(b.high) else False
        within = c.high - b.low <= max(relative * abs(b.low), absolute) if math.isfinite(b.low) else False
    if worse:
        return "fail"
    if within:
        return "pass"
    return "open"


def paired_excess(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray,
                  relative: float,
                  absolute: float) -> np.ndarray:
    """Each request's slowdown beyond its own allowance: ``c - b - max(relative * b, absolute)``."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    beyond: np.ndarray = c - b - np.maximum(relative * np.abs(b), absolute)
    return beyond


def paired_decision(excess: QuantileBounds) -> str:
    """``fail`` when the excess's quantile is proven above zero, ``pass`` when proven at most zero."""
    if excess.low > 0.0:
        return "fail"
    if excess.high <= 0.0:
        return "pass"
    return "open"


def spread_decision(excess: np.ndarray, p: float, alpha: float) -> str:
    """``paired_decision`` on all pairs; a fail must also be spread over the run: each half of
    it holds at least a quarter of the requests slowed beyond their allowance.

    A cold arm or a mid-run drift slows a block of consecutive requests, not a share spread
    over the run: that is the drift guard's business, not a tail's (``unstable``). A tail puts
    about half of its slowed requests in each half of the run, a block nearly all in one. The
    whole run's sequence alone carries the error rate and this only removes fails, so the
    false-fail rate stays <= alpha. (The rule before, each half proving the fail on its own
    sequence, needed twice the pairs: a stall on one request in ten was still open after 108.)
    """
    whole = paired_decision(quantile_sequence(excess, p, alpha))
    if whole != "fail":
        return whole
    return "fail" if spread_over_run(np.asarray(excess) > 0.0) else "unstable"


def spread_over_run(slowed: np.ndarray) -> bool:
    """Each half of the run holds at least a quarter of the slowed requests."""
    half = len(slowed) // 2
    first, second = int(slowed[:half].sum()), int(slowed[half:].sum())
    return 4 * min(first, second) >= first + second
