"""Anytime-valid intervals: they stay valid however often the data are looked at.

A sign-off that judges after every round of load and stops when it is sure would inflate
its false alarms with ordinary (fixed-sample) intervals: checked after every round, a 95%
interval of an A/A' difference excludes zero far more often than 5% of the time. These
intervals are *confidence sequences*: with probability ``1 - alpha`` they cover the true
value at every look at once, so a run may stop at any look, for any reason.

- ``anytime_ols``: coefficients of a linear model of the paired differences (the shift, the
  placement bias, the cost per image, the drift over time) with anytime-valid intervals from
  the Bayes-factor t-test of Lindon, Ham, Tingley and Bojinov, "Anytime-valid linear models
  and regression adjusted causal inference in randomized experiments" (2024), the method
  behind Netflix's sequential canary tests (Lindon et al., KDD 2022). The closed form is the
  one the ``savvi`` package implements (``LinearRegression.calculate_conf_int``); savvi itself
  is not a dependency because it pulls ``cvxpy`` and plotting libraries into a service that
  needs twenty lines of it. Coverage is checked by simulation in the tests.
- ``rate_sequence``: a mismatch rate's interval from the beta-binomial mixture martingale
  (Robbins' method of mixtures; Howard, Ramdas et al., "Time-uniform, nonparametric,
  nonasymptotic confidence sequences", 2021): one mismatch against an allowed rate of zero
  is already a proof, and zero mismatches in ``n`` say which rates are excluded.

Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import betaln

from abserve.compare.stats.interval import Interval


@dataclass(frozen=True)
class OlsFit:
    """Coefficients of an anytime-valid least-squares fit, in the order of the columns."""

    n: int
    coefficients: tuple[Interval, ...]
    sigma: float


def mixture_radius(se: float, z2: float, nu: int, alpha: float, phi: float) -> float:
    """Half-width of the anytime-valid interval of one coefficient (Lindon et al. 2024).

    ``se``: its standard error; ``z2``: ``1 / (X'X)^-1_jj`` (its information per unit
    variance); ``nu``: degrees of freedom; ``phi``: the mixture's prior precision (in units
    of the noise: small ``phi`` is tuned for large effects).
    """
    if nu <= 0 or not math.isfinite(se) or se <= 0.0:
        return math.inf
    r = phi / (phi + z2)
    root = math.exp((math.log(r) + 2.0 * math.log(alpha)) / (nu + 1))
    denominator = root - r
    if denominator <= 0.0:
        return math.inf
    return se * math.sqrt(nu * (1.0 - root) / denominator)


def anytime_ols(y: Sequence[float] | np.ndarray, x: np.ndarray, alpha: float,
                phi: float = 1.0) -> OlsFit | None:
    """Fit ``y ~ x`` (``x``: n rows, one column per coefficient, intercept included).

    None when the design is singular or has no residual degrees of freedom.
    """
    ys = np.asarray(y, dtype=float)

    def rss(beta: np.ndarray) -> float:
        residual = ys - x @ beta
        return float(residual @ residual)

    return fit_from_moments(x.T @ x, x.T @ ys, rss, x.shape[0], alpha, phi)


def fit_from_moments(gram: np.ndarray, xty: np.ndarray, rss: Callable[[np.ndarray], float], n: int,
                     alpha: float, phi: float, min_rss: float = -math.inf) -> OlsFit | None:
    """``anytime_ols`` from ``X'X``, ``X'y``, the residual sum of squares of a ``beta`` and ``n``.

    None also when the residual sum of squares is at most ``min_rss``.
    """
    p = gram.shape[0]
    if n <= p + 1:
        return None
    if np.linalg.matrix_rank(gram) < p:
        return None
    covariance = np.linalg.inv(gram)
    beta = covariance @ xty
    squares = rss(beta)
    if squares <= min_rss:
        return None
    sigma2 = squares / (n - p)
    intervals = []
    for j in range(p):
        c = float(covariance[j, j])
        se = math.sqrt(c * sigma2)
        radius = mixture_radius(se, 1.0 / c, n - p - 1, alpha, phi)
        intervals.append(Interval(float(beta[j]), float(beta[j]) - radius, float(beta[j]) + radius))
    return OlsFit(n=n, coefficients=tuple(intervals), sigma=math.sqrt(sigma2))


def _log_mixture(k: int, n: int, p: float, a: float, b: float) -> float:
    """log of the beta-binomial mixture martingale of ``k`` successes in ``n`` at rate ``p``."""
    if p <= 0.0:
        return math.inf if k > 0 else 0.0
    if p >= 1.0:
        return math.inf if k < n else 0.0
    likelihood = k * math.log(p) + (n - k) * math.log1p(-p)
    return float(betaln(a + k, b + n - k) - betaln(a, b)) - likelihood


def rate_sequence(k: int, n: int, alpha: float, prior: float = 0.5) -> Interval:
    """Anytime-valid interval of a Bernoulli rate after ``k`` events in ``n`` trials.

    The set of rates ``p`` whose mixture martingale (Beta(prior, prior) mixture) stays below
    ``1/alpha``. With ``n == 0`` it is ``[0, 1]``.
    """
    if n == 0:
        return Interval(math.nan, 0.0, 1.0)
    level = math.log(1.0 / alpha)
    estimate = k / n

    def excess(p: float) -> float:
        return _log_mixture(k, n, p, prior, prior) - level

    tiny = 1e-12
    low = 0.0 if k == 0 else float(brentq(excess, tiny, estimate))
    high = 1.0 if k == n else float(brentq(excess, estimate, 1.0 - tiny))
    return Interval(estimate, low, high)
