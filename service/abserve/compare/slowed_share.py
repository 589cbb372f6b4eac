"""The share of requests slowed beyond their own allowance, net of the mirrored direction, anytime-valid.

What a tail guard proves (issue 58). Each pair is a request both arms answered at the same instant.
It is *slowed* when the candidate took longer than the baseline by more than the request's own
allowance (``c - b > max(r * b, a)``: 10% of its own latency in the CPU default) and *mirrored*
when the baseline took longer than the candidate by more than the candidate's allowance
(``b - c > max(r * c, a)``). Two identical builds sent the same requests at the same instant are
exchangeable, so they slow as many requests one way as the other: noise is not slowdown. A
guard gates the **net share** ``delta = P(slowed) - P(mirrored)``: it fails once ``delta`` is
proven above its allowed share ``q`` (1% for a p99 guard, 5% for p95), passes once proven at
most ``q``.

The interval is a betting confidence sequence per side (Waudby-Smith & Ramdas, "Estimating means
of bounded random variables by betting", JRSS B 2024): against ``delta <= m`` each pair's sign
``D`` (+1 slowed, -1 mirrored, 0 neither) multiplies a wealth by ``1 + lam (D - m)``, a nonnegative
martingale under that null for any fixed ``lam`` in ``[0, 1 / (1 + m)]``; the average over the
fractions ``BETS`` of that range is one too, so by Ville's inequality its largest value over the
looks crosses ``1 / alpha`` with probability at most ``alpha`` (valid at every look at once, however
the run stops). With fixed bets the wealth depends only on the counts. Each side at the full
``alpha``: a fail is wrong at most ``alpha`` of the time when ``delta <= q``, a pass when
``delta > q``. With ``BETS`` a fail needs 5-7 slowed requests and none mirrored in 30-150 pairs
at ``q = 1%`` (the p99 guard's paired quantile sequence needed 5-9, and counted noise as
slowdown), 7-15 at ``q = 5%`` (8-20); each mirrored request costs about four more. Bets of
0.3-0.95 needed one slowed request more (``benchmarks/tails.md``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

BETS = (0.8, 0.97, 0.999)  # fractions of the largest stake: a fail from 5-7 slowed requests
RESOLUTION = 1e-4  # of an interval's bounds


@dataclass(frozen=True)
class SlowedShare:
    """A guard's net share of slowed requests after ``n`` pairs, with its anytime-valid interval."""

    n: int
    slowed: int  # candidate slower than the baseline by more than the request's allowance
    mirrored: int  # baseline slower than the candidate by more than the request's allowance
    low: float  # -1: not yet bounded below
    high: float  # 1: not yet bounded above

    @property
    def estimate(self) -> float:
        return (self.slowed - self.mirrored) / self.n if self.n else math.nan


def slowed_signs(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray,
                 relative: float, absolute: float, margin: float = 0.0) -> np.ndarray:
    """Per pair: +1 slowed, -1 mirrored, 0 neither; each allowance widened by ``margin``."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    slowed = c - b > np.maximum(relative * np.abs(b), absolute) + margin
    mirrored = b - c > np.maximum(relative * np.abs(c), absolute) + margin
    signs: np.ndarray = slowed.astype(np.int8) - mirrored.astype(np.int8)
    return signs


def _counts(signs: np.ndarray, looks: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slowed, neither, mirrored) after each of ``looks`` pairs."""
    at = np.asarray(looks, dtype=np.int64)
    up = np.concatenate([[0], np.cumsum(signs > 0)])[at]
    down = np.concatenate([[0], np.cumsum(signs < 0)])[at]
    return up.astype(float), (at - up - down).astype(float), down.astype(float)


def log_evidence(up: np.ndarray, zero: np.ndarray, down: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Log wealth of the bets against ``delta <= m`` after counts ``(up, zero, down)`` (broadcast with ``m``).

    Each bet stakes a fraction ``c`` of the most a wealth can stake, ``lam = c / (1 + m)``; the
    wealth is the average over ``BETS`` (a mirrored pair costs a bet ``c`` its ``1 - c``).
    """
    up, zero, down, m = (np.asarray(v, dtype=float)[..., None]
                         for v in np.broadcast_arrays(up, zero, down, m))
    c = np.asarray(BETS)
    lam = c / (1.0 + m)
    logs = up * np.log1p(lam * (1.0 - m)) + zero * np.log1p(-lam * m) + down * np.log1p(-lam * (1.0 + m))
    wealth: np.ndarray = logsumexp(logs, axis=-1) - math.log(len(BETS))
    return wealth


def _proven_above(signs: np.ndarray, looks: Sequence[int], m: float, alpha: float) -> bool:
    """Whether some look proved ``delta > m`` (the running maximum of the bets' wealth)."""
    up, zero, down = _counts(signs, looks)
    return bool(log_evidence(up, zero, down, np.full(len(up), m)).max() >= math.log(1.0 / alpha))


def _lowest_bound(signs: np.ndarray, looks: Sequence[int], alpha: float) -> float:
    """The largest ``m`` proven below ``delta`` (-1 when none), to ``RESOLUTION``. Each bet's
    wealth falls as ``m`` grows, so the proven ``m`` are one range below it: bisection."""
    lo, hi = -1.0 + RESOLUTION, 1.0 - RESOLUTION
    if not _proven_above(signs, looks, lo, alpha):
        return -1.0
    if _proven_above(signs, looks, hi, alpha):
        return hi
    while hi - lo > RESOLUTION:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _proven_above(signs, looks, mid, alpha) else (lo, mid)
    return lo


def share_sequence(signs: np.ndarray, looks: Sequence[int], alpha: float) -> SlowedShare:
    """The net share after the last look, its interval from every look's wealth (each side at ``alpha``)."""
    signs = np.asarray(signs)
    looks = [n for n in looks if 0 < n <= len(signs)] or ([len(signs)] if len(signs) else [])
    n = looks[-1] if looks else 0
    if not n:
        return SlowedShare(0, 0, 0, -1.0, 1.0)
    low = _lowest_bound(signs, looks, alpha)
    high = -_lowest_bound(-signs, looks, alpha)  # mirrored: delta < m is -delta > -m
    seen = signs[:n]
    return SlowedShare(n, int((seen > 0).sum()), int((seen < 0).sum()), low, high)


def share_decision(signs: np.ndarray, looks: Sequence[int], allowed: float, alpha: float) -> str:
    """``fail`` once the net share is proven above ``allowed``, ``pass`` once proven at most it."""
    signs = np.asarray(signs)
    looks = [n for n in looks if 0 < n <= len(signs)]
    if not looks:
        return "open"
    if _proven_above(signs, looks, allowed, alpha):
        return "fail"
    if _proven_above(-signs, looks, -allowed, alpha):
        return "pass"
    return "open"


def pairs_to_decide(n: int, slowed: int, mirrored: int, allowed: float, alpha: float,
                    limit: int = 100_000) -> int | None:
    """About how many pairs would decide a guard if today's shares held: the first count (doubling,
    then bisection) at which ``slowed / n`` and ``mirrored / n`` prove the net share above (or at
    most) ``allowed``; None when they sit on it or need more than ``limit``."""
    if not n:
        return None
    fractions = np.array([slowed, n - slowed - mirrored, mirrored]) / n
    beyond = (slowed - mirrored) / n > allowed
    m = allowed if beyond else -allowed

    def decides(k: int) -> bool:
        up, zero, down = (fractions if beyond else fractions[::-1]) * k
        return bool(log_evidence(np.array(up), np.array(zero), np.array(down), np.array(m))
                    >= math.log(1.0 / alpha))

    hi = n
    while not decides(hi):
        hi *= 2
        if hi > limit:
            return None
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return max(hi, n)
