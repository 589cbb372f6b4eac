"""judge() on synthetic runs with known answers: each outcome and each invalidity reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, arm, exchange, provenance, run_info

from abserve.compare import EXIT_CODES, Judgment, Policy, PolicyError, judge, load_policy
from abserve.compare.policy import MetricRule

ROOT = Path(__file__).resolve().parents[3]
SWAP = [1, 2, 3, 99, 98, 97, 96, 95]


def policy(**kw: object) -> Policy:
    rules = (
        MetricRule(metric="tpot", allowed_relative=0.05, critical=True),
        MetricRule(metric="ttft", allowed_relative=0.05, critical=True),
    )
    return Policy.model_validate({"metrics": rules, "min_samples": 30, **kw})


def line(j: Judgment, name: str) -> str:
    return next(m.outcome for m in j.metrics if m.name == name)


def test_default_policy_file_loads() -> None:
    p = load_policy(ROOT / "configs/policy/default.yaml")
    assert p.arms.floor == "a2"
    assert p.warmup_requests == 10
    assert len(p.metrics) >= 4


def test_policy_typos_and_bad_values_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("confidenc: 0.9\n")
    with pytest.raises(PolicyError, match="confidenc"):
        load_policy(bad)
    bad.write_text("items_buckets: [4, 2]\n")
    with pytest.raises(PolicyError, match="ascending"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


def test_equal_arms_pass_with_a_clean_noise_floor() -> None:
    j = judge(run_info(), ab_run(80), policy())
    assert (j.verdict, j.exit_code) == ("pass", 0)
    assert j.equality[0].summary.counts["identical"] == 80
    assert j.equality_verdict is not None
    assert j.equality_verdict.floor_measured
    assert {e.right for e in j.equality} == {"b", "a2"}
    assert j.lookup() == {"a": "linear", "b": "bisect", "a2": "linear"}


def test_known_tpot_shift_fails_and_is_estimated() -> None:
    j = judge(run_info(), ab_run(80, itl_shift=0.002, seed=1), policy())  # +20%/token
    tpot = next(m for m in j.metrics if m.name == "tpot.hl")
    assert tpot.outcome == "fail"
    assert j.verdict == "fail"
    assert j.exit_code == 1
    assert tpot.low is not None
    assert tpot.high is not None
    assert tpot.low < 0.002 < tpot.high
    assert tpot.threshold == pytest.approx(0.05 * tpot.baseline_value)  # type: ignore[operator]
    assert "beyond" in tpot.reason
    assert "ms" in tpot.reason
    assert line(j, "ttft.hl") == "pass"


def test_faster_candidate_passes_an_increase_gate_but_fails_an_either_gate() -> None:
    runs = ab_run(80, itl_shift=-0.002)
    assert line(judge(run_info(), runs, policy()), "tpot.hl") == "pass"
    either = policy(metrics=[MetricRule(metric="tpot", direction="either", critical=True)])
    assert judge(run_info(), runs, either).verdict == "fail"


def test_shift_near_the_threshold_is_marginal_or_inconclusive() -> None:
    runs = ab_run(40, itl_shift=0.00055, seed=4)  # about +5.5% against an allowed 5%
    assert line(judge(run_info(), runs, policy()), "tpot.hl") in ("marginal", "inconclusive")


def test_too_few_samples_is_inconclusive() -> None:
    j = judge(run_info(), ab_run(10, itl_shift=0.002), policy())
    assert j.verdict == "inconclusive"
    assert j.exit_code == 2
    assert all(m.outcome == "inconclusive" for m in j.metrics)
    assert "fewer than the 30" in j.metrics[0].reason


def test_warmup_exchanges_are_excluded() -> None:
    j = judge(run_info(), ab_run(50), policy(warmup_requests=25, min_samples=30))
    assert (j.exchanges_warmup, j.exchanges_judged) == (25, 25)
    assert j.verdict == "inconclusive"


def test_token_swaps_beyond_the_floor_fail_equality() -> None:
    swaps = {i: SWAP for i in range(0, 80, 5)}  # 16 of 80
    j = judge(run_info(), ab_run(80, candidate_tokens=swaps), policy())
    eq = j.equality_verdict
    assert eq is not None
    assert eq.outcome == "fail"
    assert j.verdict == "fail"
    assert j.equality[0].summary.counts["divergent"] == 16
    assert j.equality[0].by_position == {"3": 16}
    assert j.equality[0].examples[0].request_id == "req-00000"


def test_same_swap_rate_on_the_floor_is_noise_and_passes() -> None:
    swaps = {i: SWAP for i in range(0, 80, 5)}
    j = judge(run_info(), ab_run(80, candidate_tokens=swaps, floor_tokens=swaps), policy())
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "pass"


def test_one_rare_divergence_is_marginal_not_fail() -> None:
    j = judge(run_info(), ab_run(80, candidate_tokens={7: SWAP}), policy())
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "marginal"
    assert j.verdict == "marginal"
    assert j.exit_code == 2


def test_unmeasured_floor_follows_the_policy() -> None:
    runs = ab_run(60, arms=("a", "b"))
    info = run_info({"a": provenance("linear"), "b": provenance("bisect")})
    j = judge(info, runs, policy())
    assert j.verdict == "pass"
    assert j.equality_verdict is not None
    assert not j.equality_verdict.floor_measured
    strict = judge(info, runs, policy(allow_unmeasured_floor=False))
    assert strict.verdict == "inconclusive"
    assert "not measured" in strict.reasons[0]


@pytest.mark.parametrize(
    ("arms", "status", "needle"),
    [
        ({"a": provenance("linear"), "b": provenance("bisect", proven=None)}, "completed", "proved nothing"),
        (
            {"a": provenance("linear"), "b": provenance("bisect", proven="linear")},
            "completed",
            "proved linear",
        ),
        ({"a": provenance("linear")}, "completed", "'b' is missing"),
        (None, "interrupted", "interrupted"),
    ],
)
def test_untrustworthy_runs_are_invalid(arms: dict | None, status: str, needle: str) -> None:
    j = judge(run_info(arms, status=status), ab_run(60), policy())
    assert (j.verdict, j.exit_code) == ("invalid", EXIT_CODES["invalid"])
    assert any(needle in r for r in j.invalid_reasons)


def test_coverage_gap_and_error_rate_are_invalid() -> None:
    runs = ab_run(60)
    for ex in runs[:5]:
        del ex.arms["b"]
    j = judge(run_info(), runs, policy())
    assert any("coverage gap" in r for r in j.invalid_reasons)
    runs = ab_run(60)
    for ex in runs[:5]:
        ex.arms["b"] = arm("b", [], status=500)
    j = judge(run_info(), runs, policy())
    assert j.verdict == "invalid"
    assert any("failed 5/60" in r for r in j.invalid_reasons)
    assert j.arms["b"].errors == {"status_500": 5}


def test_truncations_are_counted_and_not_compared() -> None:
    runs = ab_run(100)
    runs[3].arms["b"] = arm("b", [1, 2, 3], truncated=True)
    j = judge(run_info(), runs, policy())
    assert j.equality[0].summary.counts["incomparable"] == 1
    assert j.equality[0].right_problems == {"truncated": 1}
    assert j.arms["b"].truncated == 1
    assert j.verdict == "pass"


def test_breakdowns_by_profile_and_items_show_the_cost_trend_per_image() -> None:
    j = judge(run_info(), ab_run(120, itl_per_item=2e-5), policy())
    groups = {(r.dimension, r.group) for r in j.breakdowns if r.metric == "tpot"}
    assert {("profile", "chat"), ("items", "64-127"), ("items", "1")} <= groups
    trend = next(t for t in j.trends if t.metric == "tpot")
    assert trend.low < 2e-5 < trend.high


def test_judgment_is_json_round_trippable_and_versioned() -> None:
    j = judge(run_info(), ab_run(40), policy())
    again = Judgment.model_validate_json(j.model_dump_json())
    assert again == j
    assert again.schema_version == 1
    assert j.provenance.policy_sha256 == policy().digest()
    assert j.arms["a"].distributions["tpot"][50] > 0


def test_exchange_without_tags_is_still_judged() -> None:
    ex = [exchange(i, [arm("a"), arm("b"), arm("a2")]) for i in range(40)]
    for e in ex:
        e.tags.clear()
    j = judge(run_info(), ex, policy())
    assert j.verdict == "pass"
    assert j.equality[0].by_profile["untagged"].total == 40


def test_arm_absent_from_every_exchange_or_no_exchanges_is_invalid() -> None:
    j = judge(run_info(), ab_run(40, arms=("a", "a2")), policy())
    assert j.verdict == "invalid"
    assert "coverage gap: 0/40" in j.invalid_reasons[0]
    empty = judge(run_info(), [], policy())
    assert empty.verdict == "invalid"
    assert empty.invalid_reasons == ["no exchanges to judge"]


@pytest.mark.parametrize(("stop_reason", "code"), [("error_rate", 6), ("worker_lost", 7), ("setup", 3)])
def test_a_run_whose_load_stopped_is_invalid_with_the_loads_exit(stop_reason: str, code: int) -> None:
    """abserve run records why its load stopped (runs/orchestrator.py); the report keeps its exit."""
    from abserve.arms.run_paths import LoadStopped
    from abserve.model.provenance import LoadStopRecord

    stopped = LoadStopped("load chat stopped: ...; see locust.log", stop_reason, "chat")
    run = run_info(status="interrupted")
    run.provenance.load_stop = LoadStopRecord(profile="chat", stop_reason=stop_reason,
                                              exit_code=stopped.exit_code, reason=stopped.describe())
    j = judge(run, ab_run(80), policy())
    assert (j.verdict, j.exit_code) == ("invalid", code)
    assert any(r.startswith(stopped.describe()) for r in j.invalid_reasons), j.invalid_reasons
    assert f"(exit {code})" in stopped.describe() or code == 3
