"""Counterbalanced blocks in the judgment: synthetic runs with a KNOWN placement bias and
effect (the naive pooled estimate is fooled, the counterbalanced one is not), coverage of
the blocked interval by simulation, the bias guard, and the lines of an untagged or
single-placement run."""

from __future__ import annotations

import numpy as np
import pytest
from tests.support.records_factory import arm, exchange, run_info

from abserve.compare import Policy, judge
from abserve.compare.blocked import blocked_shift, pair_placement
from abserve.compare.policy import MetricRule
from abserve.compare.stats.paired import hodges_lehmann
from abserve.model.records import Exchange

ABBA = [0, 1, 1, 0]
LABELS = ["a:0,b:1,a2:0", "a:1,b:0,a2:1"]


def policy(**kw: object) -> Policy:
    rules = (MetricRule(metric="tpot", allowed_relative=0.05, critical=True),)
    return Policy.model_validate({"metrics": rules, "min_samples": 20, "arms": {"floor": None}, **kw})


def blocked_run(effect: float, bias: float, *, blocks: int = 8, per_block: int = 12,
                first_placement_extra: int = 0, seed: int = 0, tau: float = 0.0) -> list[Exchange]:
    """Arm b's time per token = a's + ``effect`` + ``bias`` on placement 0 / - ``bias`` on 1.

    ``first_placement_extra`` adds requests to every block of placement 0 (an unbalanced run,
    as when warm-up or errors eat into some blocks).
    """
    rng = np.random.default_rng(seed)
    out, i = [], 0
    for k in range(blocks):
        rot = ABBA[k % 4]
        shift_k = effect + (bias if rot == 0 else -bias) + rng.normal(0, tau)
        for _ in range(per_block + (first_placement_extra if rot == 0 else 0)):
            base = 0.010 + rng.normal(0, 0.0005)
            noise = rng.normal(0, 0.0005)
            arms = [arm("a", ttft=0.05, itl=base), arm("b", ttft=0.05, itl=max(base + shift_k + noise, 1e-4))]
            out.append(exchange(i, arms, extra_tags={"block": str(k), "placement": LABELS[rot]}))
            i += 1
    return out


def _tpot(j):
    return next(m for m in j.metrics if m.name == "tpot.hl")


def test_counterbalanced_estimate_recovers_the_effect_the_naive_one_misses() -> None:
    # an A/A' run (no effect) with a 2 ms placement bias and more data on placement 0
    exs = blocked_run(0.0, 0.002, first_placement_extra=24, seed=3)
    j = judge(run_info(), exs, policy())
    line = _tpot(j)
    assert line.method == "counterbalanced"
    assert line.low is not None
    assert line.high is not None
    assert line.low <= 0.0 <= line.high
    assert line.naive_low is not None, "the pooled estimate is fooled"
    assert line.naive_low > 0.0, "the pooled estimate is fooled"
    assert line.placement_bias is not None
    assert abs(abs(line.placement_bias) - 0.002) < 0.0005
    place = next(p for p in j.placement if p.metric == "tpot")
    assert place.method == "counterbalanced"
    assert len(place.levels) == 2
    assert {lv.placement for lv in place.levels} == {"a:0,b:1", "a:1,b:0"}
    assert place.naive_estimate is not None
    assert place.naive_estimate > 0.0005


def test_a_real_effect_is_found_under_a_larger_bias() -> None:
    exs = blocked_run(0.003, 0.002, per_block=16, seed=4)
    line = _tpot(judge(run_info(), exs, policy()))
    assert line.low is not None
    assert line.high is not None
    assert 0.0 < line.low < 0.003 < line.high
    assert line.outcome == "fail"
    assert "holds even if the placement bias" in line.reason


def test_bias_comparable_to_the_threshold_makes_a_pass_inconclusive() -> None:
    # no effect; threshold 5% of 10 ms = 0.5 ms; bias 0.6 ms is 120% of it
    exs = blocked_run(0.0, 0.0006, per_block=24, seed=5)
    line = _tpot(judge(run_info(), exs, policy()))
    assert line.outcome == "inconclusive"
    assert "placement bias" in line.reason
    assert "more blocks" in line.reason
    relaxed = _tpot(judge(run_info(), exs, policy(placement={"max_bias_ratio": 5.0})))
    assert relaxed.outcome == "pass"


def test_untagged_and_single_placement_runs_say_so() -> None:
    plain = [exchange(i, [arm("a"), arm("b", itl=0.0101)]) for i in range(40)]
    j = judge(run_info(), plain, policy())
    assert _tpot(j).method == "pooled"
    assert j.placement[0].method == "untagged"
    fixed = [ex for ex in blocked_run(0.0, 0.001, seed=6) if ex.tags["placement"] == LABELS[0]]
    j = judge(run_info(), fixed, policy())
    assert _tpot(j).method == "pooled"
    assert j.placement[0].method == "single-placement"
    assert "bias" in j.placement[0].note


def test_floor_pair_gets_its_own_placement_line() -> None:
    exs = blocked_run(0.0, 0.001, seed=7)
    for ex in exs:
        ex.arms["a2"] = arm("a2", ttft=0.05, itl=0.01).model_copy()
    j = judge(run_info(), exs, policy(arms={"floor": "a2"}))
    assert {(p.left, p.right) for p in j.placement} == {("a", "b"), ("a", "a2")}


def test_pair_placement_reads_the_pair_out_of_the_tag() -> None:
    assert pair_placement({"placement": "a:0,b:1,a2:0"}, "a", "a2") == "a:0,a2:0"
    assert pair_placement({"placement": "a:0"}, "a", "b") is None
    assert pair_placement({"placement": "garbage"}, "a", "b") is None
    assert pair_placement({}, "a", "b") is None


def _simulate(reps: int, *, blocks: int, n: int, beta: float, tau: float, extra: int,
              seed: int) -> tuple[float, float, float]:
    """Coverage of 0 (an A/A' truth) by: blocked interval, pooled naive, one placement only."""
    rng = np.random.default_rng(seed)
    hit = np.zeros(3)
    for _ in range(reps):
        diffs: list[float] = []
        ids: list[str | None] = []
        levels: list[str | None] = []
        for k in range(blocks):
            rot = ABBA[k % 4]
            m = n + (extra if rot == 0 else 0)
            d = (beta if rot == 0 else -beta) + rng.normal(0, tau) + rng.standard_t(4, size=m)
            diffs += d.tolist()
            ids += [str(k)] * m
            levels += [f"p{rot}"] * m
        res = blocked_shift(diffs, ids, levels, 0.95, 6)
        assert res is not None
        naive = hodges_lehmann(diffs)
        static = hodges_lehmann([d for d, lv in zip(diffs, levels, strict=True) if lv == "p0"])
        hit += [res.low <= 0 <= res.high, naive.low <= 0 <= naive.high, static.low <= 0 <= static.high]
    return tuple(hit / reps)


@pytest.mark.slow
def test_blocked_interval_keeps_its_coverage_where_naive_estimates_do_not() -> None:
    # fixed placement bias (1 unit = the per-request noise scale), balanced blocks
    blocked, naive, static = _simulate(150, blocks=8, n=10, beta=1.0, tau=0.0, extra=0, seed=1)
    assert blocked >= 0.92
    assert static < 0.2
    # bias that also wanders from block to block, and an unbalanced run
    blocked, naive, static = _simulate(150, blocks=8, n=10, beta=1.0, tau=0.5, extra=10, seed=2)
    assert blocked >= 0.88, blocked
    assert naive < 0.5
    assert static < 0.3


def test_report_shows_bias_next_to_the_effect_and_the_naive_estimate(tmp_path: object) -> None:
    from pathlib import Path

    from abserve.report.writer import write_report

    j = judge(run_info(), blocked_run(0.0, 0.002, first_placement_extra=10, seed=8), policy())
    paths = write_report(j, Path(str(tmp_path)))
    md = paths.markdown.read_text()
    html = paths.html.read_text()
    assert "### Placement and blocks" in md  # collapsed for the auditor, still complete
    assert "<summary>Placement: counterbalanced blocks</summary>" in md
    assert "counterbalanced" in md
    assert "on `a:0,b:1`" in md or "on `a:1,b:0`" in md
    assert 'id="placement"' in html
    assert "naive (pooled)" in html
    assert "more blocks" in md  # the verdict's advice
