"""Quantile confidence sequences: time-uniform coverage, and tail gates that stop a run.

Coverage is checked by simulation at every look at once (the property that lets a sequential
run stop on a tail gate); the gate fails a run whose candidate stalls on a third of its
requests (the winsorized mean shift does not fail), passes an A/A run, and an
undecided critical tail is a guard that blocks nothing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tests.support.strata_runs import judged, policy, run

from abserve.compare import Policy
from abserve.compare.gates import stop_now
from abserve.compare.model import MetricLine
from abserve.compare.quantile_cs import (
    accepted_counts,
    paired_decision,
    paired_excess,
    quantile_sequence,
    tail_decision,
    tail_difference,
)
from abserve.model.records import Exchange


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.5, 0.95])
def test_sequence_covers_the_true_quantile_at_every_look_at_once(p: float) -> None:
    rng = np.random.default_rng(7)
    truth = math.exp(float(np.quantile(rng.standard_normal(2_000_000), p)))
    misses = 0
    reps = 300
    for _ in range(reps):
        x = rng.lognormal(size=400)
        for n in range(10, 401, 10):
            b = quantile_sequence(x[:n], p, 0.05)
            if not b.low <= truth <= b.high:
                misses += 1
                break
    assert misses / reps <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)


def test_accepted_counts_hold_the_expected_count_and_bound_p95_from_64_values() -> None:
    lo, hi = accepted_counts(200, 0.95, 0.05) or (0, 0)
    assert lo < 190 < hi
    assert accepted_counts(63, 0.95, 0.05) == (accepted_counts(63, 0.95, 0.05) or (0, 0))
    assert (accepted_counts(63, 0.95, 0.05) or (0, 0))[1] == 63  # no upper bound yet
    assert (accepted_counts(64, 0.95, 0.05) or (0, 0))[1] < 64
    assert quantile_sequence(list(range(100)), 0.99, 0.05).high == math.inf  # p99 needs ~305


def test_two_sample_difference_fails_a_shifted_tail_and_passes_an_equal_one() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(size=600)
    assert tail_decision(tail_difference(base, base * 3, 0.95, 0.05), 0.1, 0.0) == "fail"
    same = tail_difference(base, rng.lognormal(size=600), 0.5, 0.05)
    assert tail_decision(same, 0.5, 0.0) == "pass"
    assert tail_decision(tail_difference(base[:20], base[:20] * 2, 0.95, 0.05), 0.1, 0.0) == "open"


def test_paired_excess_is_each_requests_slowdown_beyond_its_own_allowance() -> None:
    excess = paired_excess([1.0, 2.0], [1.2, 2.05], 0.1, 0.0)
    assert excess == pytest.approx([0.1, -0.15])
    assert paired_decision(quantile_sequence(-np.ones(100), 0.95, 0.05)) == "pass"
    assert paired_decision(quantile_sequence(np.ones(100), 0.95, 0.05)) == "fail"


def test_a_stall_on_a_third_of_requests_fails_the_tail_gate_and_stops_the_run() -> None:
    j = judged(run(96, stall_share=0.35))
    tail = next(m for m in j.metrics if m.name == "ttft.p95")
    assert tail.kind == "tail"
    assert tail.outcome == "fail"
    assert tail.critical
    assert tail.method == "anytime-quantile-paired"
    assert all(lk.n > 0 for lk in tail.trajectory)
    assert len(tail.trajectory) > 1
    assert next(m for m in j.metrics if m.name == "ttft.hl").outcome != "fail"  # the mean hides it
    assert j.verdict == "fail"
    assert any(r.startswith("ttft.p95: fail") for r in j.reasons)
    assert stop_now([(m.name, m.critical, m.outcome) for m in j.metrics])


def test_unknown_placement_widens_each_allowance_of_a_tail_fail_by_its_bias() -> None:
    """A by-hand run (no placement tags) fails a tail only beyond the allowance plus the policy's
    unknown_placement_bias, as its shift gates do; a controlled run ignores the bias."""
    def biased(ttft: float, design: str = "paired") -> Policy:
        return policy(sequential={"look_every": 8, "warmup": "fixed", "tails": "anytime",
                                  "tail_design": design, "unknown_placement_bias": {"ttft": ttft}})

    def tail(exchanges: list[Exchange], p: Policy) -> MetricLine:
        return next(m for m in judged(exchanges, p).metrics if m.name == "ttft.p95")

    stalls = run(96, stall_share=0.35, stall=0.5, placed=False)  # 500 ms stalls on a third
    held = tail(stalls, biased(1.0))
    assert held.outcome == "inconclusive", held.reason
    assert not held.regression
    assert held.cause is not None
    assert held.cause.kind == "placement"
    assert "placement not controlled" in held.reason
    beyond = tail(stalls, biased(0.1))
    assert beyond.outcome == "fail", beyond.reason
    assert "more than its bias" in beyond.reason
    controlled = tail(run(96, stall_share=0.35, stall=0.5), biased(1.0))
    assert controlled.outcome == "fail", controlled.reason
    shifted = run(200, stall_share=1.0, stall=0.5, placed=False)  # every request: the quantiles move
    assert tail(shifted, biased(5.0, "two-sample")).outcome == "inconclusive"
    assert tail(shifted, biased(0.0, "two-sample")).outcome == "fail"


def test_tail_decision_fails_only_beyond_the_margin() -> None:
    base = np.linspace(1.0, 2.0, 400)
    diff = tail_difference(base, base * 3, 0.95, 0.05)
    assert tail_decision(diff, 0.1, 0.0) == "fail"
    assert tail_decision(diff, 0.1, 0.0, margin=10.0) == "open"


def test_aa_tail_passes_with_enough_pairs_and_an_open_guard_blocks_nothing() -> None:
    j = judged(run(96, seed=3))
    tail = next(m for m in j.metrics if m.name == "ttft.p95")
    assert tail.outcome == "pass", tail.reason
    early = judged(run(40, seed=3))
    open_tail = next(m for m in early.metrics if m.name == "ttft.p95")
    assert open_tail.outcome == "inconclusive"
    assert open_tail.guard
    assert not open_tail.critical
    required = judged(run(40, seed=3), policy(sequential={"look_every": 8, "warmup": "fixed",
                                                          "tails": "anytime", "tails_required": True}))
    assert next(m for m in required.metrics if m.name == "ttft.p95").critical


def test_fixed_tails_keep_the_bootstrap_line() -> None:
    j = judged(run(64), policy(sequential={"look_every": 8, "warmup": "fixed"}))
    tail = next(m for m in j.metrics if m.name == "ttft.p95")
    assert tail.kind == "shift"
    assert "not anytime-valid" in tail.reason


def test_a_block_of_slow_requests_is_no_tail_fail() -> None:
    from abserve.compare.quantile_cs import spread_decision

    cold = np.concatenate([np.ones(30), -np.ones(70)])  # the first 30 slowed: a cold arm
    assert spread_decision(cold, 0.95, 0.05) == "unstable"
    spread = np.where(np.arange(100) % 3 == 0, 1.0, -1.0)  # a third, spread over the run
    assert spread_decision(spread, 0.95, 0.05) == "fail"


def test_a_drifted_shift_keeps_its_tail_from_failing() -> None:
    from abserve.compare.model import Drift, MetricLine
    from abserve.compare.tail_gate import drift_guard_tails

    shift = MetricLine(name="ttft.hl", metric="ttft", statistic="mean", direction="increase", critical=True,
                       n=50, confidence=0.95, outcome="pass", reason="",
                       drift=Drift(estimate=1.0, unstable=True))
    tail = MetricLine(name="ttft.p95", metric="ttft", statistic="p95", direction="increase", critical=True,
                      n=50, confidence=0.95, outcome="fail", reason="", kind="tail", guard=True)
    drift_guard_tails([shift, tail])
    assert tail.outcome == "unstable"
    assert not tail.critical
