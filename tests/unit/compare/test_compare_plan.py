"""Sample-size planning: the planned n really reaches the requested power in simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tests.support.records_factory import ab_run

from abserve.compare.plan import plan, requests_for_mismatch, requests_needed, robust_sigma
from abserve.compare.policy import Policy
from abserve.compare.stats.paired import hodges_lehmann


def test_planned_n_reaches_the_requested_power_in_simulation() -> None:
    sigma, effect = 1.0, 0.5
    n = requests_needed(sigma, effect, 0.95, 0.8)
    assert 30 <= n <= 36  # paired t gives 32; Wilcoxon needs ~5% more under normal data
    rng = np.random.default_rng(0)
    hits = sum(hodges_lehmann(rng.normal(effect, sigma, n)).low > 0 for _ in range(300))
    assert 0.72 <= hits / 300 <= 0.92


def test_plan_from_a_pilot_run() -> None:
    p = plan(ab_run(60), Policy(), metric="tpot", effect_relative=0.02, mismatch_rate=0.01)
    assert p.pilot_pairs == 60
    assert p.pilot_sigma > 0
    assert p.effect == pytest.approx(0.02 * p.pilot_median_baseline)  # type: ignore[operator]
    assert p.requests_needed >= 6
    assert p.requests_for_mismatch == math.ceil(math.log(0.2) / math.log(0.99))  # 161


def test_plan_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="positive"):
        requests_needed(1.0, 0.0, 0.95, 0.8)
    with pytest.raises(ValueError, match="need at least 2"):
        plan(ab_run(1), Policy(), effect=0.001)
    with pytest.raises(ValueError, match="absolute effect or a relative"):
        plan(ab_run(10), Policy())
    with pytest.raises(ValueError):
        requests_for_mismatch(0.0, 0.8)


def test_robust_sigma_is_normal_sigma_and_ignores_outliers() -> None:
    x = np.random.default_rng(1).normal(0, 2.0, 5000)
    assert robust_sigma(x) == pytest.approx(2.0, rel=0.05)
    x[:50] = 1e6
    assert robust_sigma(x) == pytest.approx(2.0, rel=0.1)
