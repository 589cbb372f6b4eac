"""Logprob drift (issue 9): a change that flips no token is still caught, against the A/A' floor."""

from __future__ import annotations

from tests.support.records_factory import ab_run, position, run_info

from abserve.compare import Policy, judge
from abserve.compare.policy import MetricRule
from abserve.model.records import Exchange


def nudge(ex: Exchange, arm: str, at: int, delta: float) -> None:
    """Move the chosen logprob at position ``at`` of one arm by ``delta``; tokens stay."""
    outcome = ex.arms[arm]
    outcome.logprobs[at] = position(outcome.token_ids[at], logprob=-0.1 + delta)


def policy(**eq: object) -> Policy:
    return Policy.model_validate({"metrics": [MetricRule(metric="tpot", critical=True)], "equality": eq})


def test_drift_on_many_image_requests_fails_and_names_the_requests() -> None:
    runs = ab_run(80)  # items cycle 1, 4, 16, 64
    hit = [ex for ex in runs if ex.tags["items"] == "64"]
    for ex in hit:
        nudge(ex, "b", 2, -0.006)
    j = judge(run_info(), runs, policy())
    e = j.equality[0]
    assert e.summary.counts["drift"] == 20
    assert e.summary.counts["divergent"] == 0
    assert e.by_items["64-127"].counts["drift"] == 20
    assert e.by_items["1"].mismatches == 0
    assert e.drift_by_position == {"2": 20}
    assert e.drift_quantiles[-1] > 0.0059
    assert {x.request_id for x in e.examples} == {ex.request_id for ex in hit}
    assert j.equality[1].summary.counts["identical"] == 80  # A/A' stays clean
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "fail"


def test_drift_is_ignored_when_the_policy_does_not_count_it() -> None:
    runs = ab_run(60)
    nudge(runs[3], "b", 0, 0.01)
    j = judge(run_info(), runs, policy(mismatch_classes=["close", "divergent"]))
    assert j.equality[0].summary.counts["drift"] == 1
    assert j.verdict == "pass"


def test_tolerance_from_the_floor_absorbs_drift_the_same_build_shows() -> None:
    runs = ab_run(60)
    for ex in runs:
        nudge(ex, "a2", 1, 1e-4)
        nudge(ex, "b", 1, 1e-4)
    assert judge(run_info(), runs, policy()).equality_verdict.outcome == "pass"  # type: ignore[union-attr]
    strict = judge(run_info(), runs, policy(drift_floor_quantile=None))
    assert strict.equality[0].summary.counts["drift"] == 60  # bitwise tolerance sees it all ...
    assert strict.equality_verdict is not None
    assert strict.equality_verdict.outcome == "pass"
    floor = judge(run_info(), runs, policy(drift_floor_quantile=1.0))
    assert floor.equality_verdict is not None
    assert floor.equality_verdict.drift_tolerance >= 1e-4
    assert floor.equality[0].summary.counts["identical"] == 60  # ... the floor's tolerance none
    for ex in runs[::4]:
        nudge(ex, "b", 1, 0.006)
    worse = judge(run_info(), runs, policy(drift_floor_quantile=1.0))
    assert worse.equality[0].summary.counts["drift"] == 15
    assert worse.equality_verdict is not None
    assert worse.equality_verdict.outcome == "fail"


def test_blocks_get_their_own_breakdown() -> None:
    runs = ab_run(60)
    for i, ex in enumerate(runs):
        ex.tags["block"] = str(i // 30)
    j = judge(run_info(), runs, policy())
    blocks = {(r.group, r.n) for r in j.breakdowns if r.dimension == "block"}
    assert blocks == {("0", 30), ("1", 30)}
