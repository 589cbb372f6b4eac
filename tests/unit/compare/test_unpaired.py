"""Unpaired latency gates: A/A passes at the policy's rate, a shift fails, one run per side
never passes, and a fail with one run per side needs the allowance plus the run-to-run spread."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from abserve.compare.policy import MetricRule, Policy
from abserve.compare.unpaired import runs_needed, unpaired_line, unpaired_shift

RULE = MetricRule(metric="ttft", statistic="hl", allowed_relative=0.05, critical=True)
P50 = MetricRule(metric="ttft", statistic="p50", allowed_relative=0.05, critical=True)
POLICY = Policy()


def side(rng: np.random.Generator, runs: int, n: int, factor: float = 1.0,
         between: float = 0.03) -> list[np.ndarray]:
    """Runs of one build: each run's level moves by ``between`` (relative sd), requests lognormal."""
    return [0.1 * factor * np.exp(rng.normal(0, between)) * rng.lognormal(0, 0.3, n) for _ in range(runs)]


def test_aa_with_repeats_fails_at_most_at_the_policy_rate() -> None:
    rng = np.random.default_rng(11)
    outcomes = [unpaired_line(P50, side(rng, 3, 200), side(rng, 3, 200), POLICY)[0].outcome
                for _ in range(300)]
    assert outcomes.count("fail") / len(outcomes) <= 1 - POLICY.confidence
    assert "pass" in outcomes  # the gate can pass with runs as clusters


def test_aa_hl_with_repeats_rarely_fails() -> None:
    rng = np.random.default_rng(12)
    outcomes = [unpaired_line(RULE, side(rng, 2, 150), side(rng, 2, 150), POLICY)[0].outcome
                for _ in range(60)]
    assert outcomes.count("fail") <= 3


def test_a_shift_beyond_the_allowance_fails_with_repeats() -> None:
    rng = np.random.default_rng(13)
    line, shift = unpaired_line(RULE, side(rng, 3, 300), side(rng, 3, 300, factor=1.3), POLICY)
    assert line.outcome == "fail"
    assert line.method == "unpaired"
    assert shift is not None
    assert shift.design == "clustered"
    assert "as clusters" in line.reason


def test_between_run_spread_widens_the_interval() -> None:
    rng = np.random.default_rng(14)
    calm = unpaired_shift(side(rng, 3, 300, between=0.0), side(rng, 3, 300, between=0.0), "hl", 0.95, 0.12)
    noisy = unpaired_shift(side(rng, 3, 300, between=0.2), side(rng, 3, 300, between=0.2), "hl", 0.95, 0.12)
    assert noisy.high - noisy.low > 2 * (calm.high - calm.low)
    assert noisy.spread is not None
    assert (noisy.spread.ratio or 0) > 2


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 3.0), st.integers(0, 2**31 - 1), st.sampled_from(["hl", "p50", "p95"]))
def test_one_run_per_side_never_passes(factor: float, seed: int, statistic: str) -> None:
    rng = np.random.default_rng(seed)
    rule = MetricRule.model_validate({"metric": "tpot", "statistic": statistic, "allowed_relative": 0.05})
    line, shift = unpaired_line(rule, side(rng, 1, 400), side(rng, 1, 400, factor=factor), POLICY)
    assert line.outcome in ("fail", "inconclusive")
    assert shift is not None
    assert shift.design == "single-run"
    if line.outcome == "fail":  # beyond the allowance plus the assumed spread
        assert line.threshold is not None
        assert (line.low or 0) > line.threshold
        assert shift.low + shift.margin > line.threshold + shift.margin
    else:
        assert "runs per side" in line.reason


def test_one_run_per_side_fail_needs_the_spread_on_top_of_the_allowance() -> None:
    rng = np.random.default_rng(15)
    base, cand = side(rng, 1, 5000, between=0.0), side(rng, 1, 5000, factor=1.10, between=0.0)
    # +10%: beyond the 5% allowance, within 5% + 12% spread: not a fail
    assert unpaired_line(RULE, base, cand, POLICY)[0].outcome == "inconclusive"
    loose = Policy.model_validate({"saved": {"run_to_run_spread": 0.0}})
    assert unpaired_line(RULE, base, cand, loose)[0].outcome == "fail"
    big = side(rng, 1, 5000, factor=1.5, between=0.0)
    assert unpaired_line(RULE, base, big, POLICY)[0].outcome == "fail"


def test_too_few_values_is_inconclusive_and_says_so() -> None:
    rng = np.random.default_rng(16)
    line, shift = unpaired_line(RULE, side(rng, 1, 10), side(rng, 1, 500), POLICY)
    assert shift is None
    assert line.outcome == "inconclusive"
    assert "fewer than the 30" in line.reason


def test_runs_needed_grows_as_the_gap_shrinks() -> None:
    wide, narrow = runs_needed(0.05, 0.01, 0.95), runs_needed(0.01, 0.01, 0.95)
    assert wide is not None
    assert narrow is not None
    assert 2 <= wide < narrow
    assert runs_needed(1e-6, 0.01, 0.95) is None


def test_one_run_against_repeats_never_passes_and_uses_the_measured_spread() -> None:
    rng = np.random.default_rng(17)
    base = side(rng, 3, 400, between=0.0)
    line, shift = unpaired_line(RULE, base, side(rng, 1, 400, between=0.0), POLICY)
    assert shift is not None
    assert shift.design == "single-run"
    assert shift.spread is not None  # measured on the baseline's three runs
    assert line.outcome == "inconclusive"
    assert "measured on the side with repeats" in line.reason
    assumed = unpaired_shift(base[:1], side(rng, 1, 400), "hl", 0.95, 0.12)
    assert shift.margin < assumed.margin  # calm runs: less than the assumed 12%
