"""selftest expectations on synthetic runs with known answers: each expectation held and broken."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, provenance, run_info

from abserve.compare import Policy, judge, load_policy
from abserve.model.records import LookupTelemetry
from abserve.runs.selftest import (
    configured_delay_us,
    load_selftest,
    roles_policy,
)
from abserve.runs.selftest_checks import CheckSpec, SelftestConfig, SelftestResult, evaluate, injected_effect
from abserve.runs.selftest_md import results_markdown

ROOT = Path(__file__).resolve().parents[3]
SWAP = [1, 2, 3, 99, 98, 97, 96, 95]


def policy() -> Policy:
    return load_policy(ROOT / "configs/policy/selftest.yaml")


def spec(expect: str, candidate: str = "b", floor: str | None = None, **kw: object) -> CheckSpec:
    return CheckSpec.model_validate(
        {"name": "c", "experiment": "e", "baseline": "a", "candidate": candidate, "floor": floor,
         "expect": expect, **kw})


def judged(s: CheckSpec, exchanges: list, arms: dict | None = None):
    return judge(run_info(arms), exchanges, roles_policy(policy(), s))


def telemetry(calls: int, per_call_s: float, steps: int) -> LookupTelemetry:
    return LookupTelemetry(lookup_calls=calls, lookup_seconds=calls * per_call_s, gather_calls=steps)


def test_identical_builds_pass_and_a_shifted_one_does_not() -> None:
    s = spec("pass", candidate="a2")
    assert evaluate(s, judged(s, ab_run(60))).holds
    shifted = spec("pass", candidate="b")
    result = evaluate(shifted, judged(shifted, ab_run(60, itl_shift=0.004)))
    assert not result.holds
    assert result.verdict == "fail"


def test_correctness_mutant_must_fail_on_equality_and_name_the_first_divergence() -> None:
    s = spec("fail-equality", floor="a2")
    result = evaluate(s, judged(s, ab_run(60, candidate_tokens={i: SWAP for i in range(12, 40)})))
    assert result.holds
    assert result.verdict == "fail"
    assert result.details[0].startswith("first divergent request req-00012 at output position 3")


def test_correctness_mutant_that_changes_nothing_breaks_the_expectation() -> None:
    s = spec("fail-equality", floor="a2")
    result = evaluate(s, judged(s, ab_run(60)))
    assert not result.holds
    assert result.verdict == "pass"


def slow_arms(per_call_s: float) -> dict:
    base, slow = provenance("linear"), provenance("linear")
    base.telemetry = telemetry(1000, 2e-6, 1000)
    slow.telemetry = telemetry(1000, 2e-6 + per_call_s, 1000)
    return {"a": base, "b": slow}


def test_slowness_mutant_fails_on_latency_with_its_injected_effect_inside_the_interval() -> None:
    s = spec("fail-latency", delay_us=3000)
    exchanges = ab_run(60, itl_shift=0.003, arms=("a", "b"))
    result = evaluate(s, judged(s, exchanges, slow_arms(0.003)))
    assert result.holds, result.details
    assert result.injected is not None
    assert result.injected.expected_s == pytest.approx(0.003)
    assert result.injected.configured_s == pytest.approx(0.003)
    assert "inside" in result.details[0]


def test_an_injected_effect_outside_the_interval_breaks_the_expectation() -> None:
    s = spec("fail-latency", delay_us=3000)
    exchanges = ab_run(60, itl_shift=0.003, arms=("a", "b"))
    result = evaluate(s, judged(s, exchanges, slow_arms(0.009)))  # telemetry says 9 ms, data 3 ms
    assert not result.holds
    assert result.verdict == "fail"
    assert "OUTSIDE" in result.details[0]


def test_injected_effect_scales_with_lookup_calls_per_engine_step() -> None:
    effect = injected_effect(telemetry(100, 1e-6, 100), telemetry(300, 2001e-6, 100), 2000)
    assert effect is not None
    assert effect.calls_per_step == 3
    assert effect.expected_s == pytest.approx(0.006)
    assert effect.configured_s == pytest.approx(0.006)
    assert injected_effect(telemetry(0, 0, 0), telemetry(300, 2e-3, 100), None) is None


def test_measured_change_holds_unless_the_run_is_invalid() -> None:
    s = spec("measured", floor="a2")
    assert evaluate(s, judged(s, ab_run(60, itl_shift=0.004))).holds
    arms = {"a": provenance("linear"), "b": provenance("bisect", proven=None), "a2": provenance("linear")}
    result = evaluate(s, judged(s, ab_run(60), arms))
    assert not result.holds
    assert result.verdict == "invalid"


def test_the_shipped_selftest_config_is_valid_and_reads_the_mutant_delay() -> None:
    config = load_selftest(ROOT / "configs/selftest.yaml")
    assert {c.expect for c in config.checks} == {"pass", "measured", "fail-equality", "fail-latency",
                                                 "fail-tail"}
    tail = next(c for c in config.checks if c.expect == "fail-tail")
    assert tail.policy is not None
    assert tail.policy.is_file()
    assert tail.metric in {r.name for r in load_policy(tail.policy).metrics if r.critical}
    slow = next(c for c in config.checks if c.expect == "fail-latency")
    delay = configured_delay_us(ROOT / config.experiments[slow.experiment], slow.candidate)
    assert delay is not None
    assert delay > 0


def test_checks_must_name_configured_experiments() -> None:
    with pytest.raises(ValueError, match="not configured"):
        SelftestConfig.model_validate(
            {"policy": "p.yaml", "experiments": {"x": "x.yaml"},
             "checks": [{"name": "c", "experiment": "y", "baseline": "a", "candidate": "b",
                         "expect": "pass"}]})


def test_results_table_shows_expected_and_actual_per_check() -> None:
    s = spec("fail-equality", floor="a2")
    check = evaluate(s, judged(s, ab_run(60)))
    result = SelftestResult(ok=False, exit_code=1, started_at=0, ended_at=1, policy="p", experiments=[],
                            checks=[check])
    text = results_markdown(result)
    assert "| c | a vs b | fail-equality | pass | NO |" in text
    assert "**FAILED**" in text


def test_sleeping_slow_mutant_takes_its_delay_and_returns_the_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from abserve.vllm_plugin import mutants
    from abserve.vllm_plugin.lookup import linear_window

    monkeypatch.setenv(mutants.MUTANT_ENV, "slow")
    monkeypatch.setenv(mutants.DELAY_ENV, "3000")
    monkeypatch.setenv(mutants.DELAY_KIND_ENV, "sleep")
    slow = mutants.mutate_lookup(mutants.selected_mutant(), linear_window)
    began = time.perf_counter()
    assert slow([], 0, 10) == (0, 0)
    assert time.perf_counter() - began >= 0.003
    monkeypatch.setenv(mutants.DELAY_KIND_ENV, "nap")
    with pytest.raises(ValueError, match="DELAY_KIND"):
        mutants.delay_kind()


def test_an_interval_above_the_injected_effect_holds_only_within_the_allowed_amplification() -> None:
    exchanges = ab_run(60, itl_shift=0.004, arms=("a", "b"))  # served effect 4 ms per token
    strict = spec("fail-latency", delay_us=3000)
    result = evaluate(strict, judged(strict, exchanges, slow_arms(0.003)))  # injected 3 ms
    assert not result.holds
    assert result.contained is False
    loose = spec("fail-latency", delay_us=3000, amplification=1.5)
    result = evaluate(loose, judged(loose, exchanges, slow_arms(0.003)))
    assert result.holds
    assert result.contained is False
    assert "below the reported" in result.details[0]
    too_small = evaluate(loose, judged(loose, exchanges, slow_arms(0.002)))  # 4 ms > 1.5 x 2 ms
    assert not too_small.holds
    assert "OUTSIDE" in too_small.details[0]


def test_an_interval_below_the_injected_effect_holds_only_within_the_allowed_shortfall() -> None:
    """Beside CPU hogs a sleeping pause is partly absorbed: the served effect may fall short."""
    exchanges = ab_run(60, itl_shift=0.004, arms=("a", "b"))  # served effect 4 ms per token
    strict = spec("fail-latency", delay_us=4500, amplification=1.5)
    result = evaluate(strict, judged(strict, exchanges, slow_arms(0.0045)))  # injected 4.5 ms
    assert not result.holds
    assert "OUTSIDE" in result.details[0]
    loose = spec("fail-latency", delay_us=4500, amplification=1.5, shortfall=0.15)
    result = evaluate(loose, judged(loose, exchanges, slow_arms(0.0045)))
    assert result.holds
    assert result.contained is False
    assert "above the reported" in result.details[0]
    assert "falls short of it" in result.details[0]
    too_large = evaluate(loose, judged(loose, exchanges, slow_arms(0.006)))  # 4 ms < 0.85 x 6 ms
    assert not too_large.holds
    assert "OUTSIDE" in too_large.details[0]


def test_rejudge_reads_the_records_of_an_earlier_selftest_without_running_anything(tmp_path: Path) -> None:
    from rich.console import Console

    from abserve.runs.selftest import run_selftest, write_results
    from abserve.runs.selftest_checks import ExperimentOutcome

    config = tmp_path / "selftest.yaml"
    config.write_text(f"policy: {ROOT / 'configs/policy/selftest.yaml'}\nexperiments: {{e: x.yaml}}\n"
                      "checks: [{name: c, experiment: e, baseline: a, candidate: b, expect: pass}]\n")
    gone = ExperimentOutcome(name="e", config="x.yaml", out_dir=str(tmp_path), error="server died")
    write_results(SelftestResult(ok=False, exit_code=3, started_at=0, ended_at=1, policy="p",
                                 experiments=[gone], checks=[]), tmp_path)
    assert run_selftest(config, tmp_path, Console(file=None, quiet=True), rejudge=True) == 3
    text = (tmp_path / "selftest.md").read_text()
    assert "| c | a vs b | pass | not run | NO |" in text
    assert "server died" in text


def test_fail_tail_holds_only_when_the_run_fails_on_the_named_tail() -> None:
    """The tail check judges with its own policy (the CPU default's gates): a stall after the first
    token on one request in four fails ``tpot.p99``; the same traffic without it breaks the check."""
    from tests.support.stall_runs import judged as stall_judged
    from tests.support.stall_runs import run as stall_run

    tail = spec("fail-tail", metric="tpot.p99", policy=ROOT / "configs/policy/selftest-tail.yaml")
    assert tail.policy is not None
    gates = load_policy(tail.policy)
    held = evaluate(tail, stall_judged(stall_run(64, decode_stall=0.3, every=4), gates))
    assert held.holds, held.details
    assert held.verdict == "fail"
    assert held.details[0].startswith("tpot.p99 fail: ")
    broken = evaluate(tail, stall_judged(stall_run(96), gates))
    assert not broken.holds
    assert broken.verdict == "pass"
    missing = evaluate(spec("fail-tail", metric="itl.p99"), stall_judged(stall_run(64), gates))
    assert not missing.holds
    assert missing.details[0] == "the policy has no itl.p99 line"
