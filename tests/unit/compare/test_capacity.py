"""The capacity stage's pure parts: SLO, brackets, the rate search, knees and gates (issue 59)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abserve.compare.capacity import ArmStep, Slo, StepRecord, bracket, holds, interpolated_knee
from abserve.compare.capacity_gates import gate_rows, judge_capacity
from abserve.compare.capacity_search import CapacityConfig, next_rate, steps_to_resolve
from abserve.compare.capacity_sim import simulate_stage
from abserve.compare.latency import RequestLatency


def _cap(**kw: object) -> CapacityConfig:
    base: dict[str, object] = {"slo": {"e2e_s": 5.0}, "start_rate": 0.5, "growth": 1.5, "step_s": 60,
                               "warmup_s": 10, "drain_s": 10, "max_steps": 10, "bootstrap": 200}
    return CapacityConfig.model_validate({**base, **kw})


def test_slo_needs_every_limit_and_a_finished_request() -> None:
    slo = Slo(ttft_s=1.0, tpot_s=0.1, e2e_s=3.0)
    assert slo.met(RequestLatency(ttft=0.5, tpot=0.05, itl=0.05, e2e=2.0, output_tokens=24))
    assert not slo.met(RequestLatency(ttft=1.5, tpot=0.05, itl=0.05, e2e=2.0, output_tokens=24))
    assert not slo.met(RequestLatency(ttft=0.5, tpot=0.05, itl=0.05, e2e=None, output_tokens=24))
    assert not slo.met(None)
    assert Slo(e2e_s=3.0).met(RequestLatency(ttft=9.0, tpot=None, itl=None, e2e=2.5, output_tokens=1))


@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_bracket_is_the_first_break_after_an_unbroken_run(held: list[bool]) -> None:
    rates = [0.1 * (k + 1) for k in range(len(held))]
    h, f = bracket(rates, held)
    below = [ok for r, ok in zip(rates, held, strict=True) if h is not None and r <= h]
    assert all(below)
    if f is not None:
        assert not held[rates.index(f)]
        assert h is None or h < f
    else:
        assert all(held)


@given(st.floats(0.1, 10), st.floats(1.01, 3), st.floats(0.5, 1), st.floats(0, 0.49))
def test_interpolated_knee_lies_in_its_bracket(h: float, ratio: float, a_h: float, a_f: float) -> None:
    knee = interpolated_knee(h, h * ratio, a_h, a_f, 0.5)
    assert h <= knee <= h * ratio * (1 + 1e-9)


def test_holds_needs_attainment_and_keeping_up() -> None:
    assert holds(9, 10, 10, 0.9)
    assert not holds(8, 10, 10, 0.9)
    assert not holds(0, 0, 0, 0.9)


def test_search_grows_goes_down_narrows_and_ends() -> None:
    cap = _cap(max_rate=2.0, min_rate=0.2)
    assert next_rate({}, cap) == (0.5, "start")
    assert next_rate({"a": {0.5: True}, "b": {0.5: True}}, cap) == (0.75, "grow")
    assert next_rate({"a": {0.5: True}, "b": {0.5: False}}, cap) == (0.333, "down")
    rate, why = next_rate({"a": {0.5: True, 0.75: False}, "b": {0.5: True, 0.75: False}}, cap)
    assert rate == pytest.approx(0.612)
    assert why.startswith("narrow")
    rate, why = next_rate({"a": {0.5: True, 0.52: False}, "b": {0.5: True, 0.52: False}}, cap)
    assert rate is None
    assert "within 10%" in why
    rate, why = next_rate({"a": {0.25: False}, "b": {0.25: True}}, cap)
    assert rate is None
    assert "SLO unmet at the lowest rate" in why
    assert "a" in why
    rate, why = next_rate({"a": {1.5: True}, "b": {1.5: True}}, cap)
    assert rate is None
    assert "max_rate" in why


def test_steps_to_resolve_counts_bisections() -> None:
    cap = _cap()
    assert steps_to_resolve({"a": (1.0, 1.05)}, cap) == 0
    assert steps_to_resolve({"a": (1.0, 1.5)}, cap) == 3
    assert steps_to_resolve({"a": (None, 0.5)}, cap) == 2


def test_every_arrival_of_a_step_could_be_in_flight_at_once() -> None:
    cap = _cap(users=64)
    assert cap.users_for(0.5) == 64
    assert cap.users_for(5.0) == 5 * (60 + 10) + 8


def test_config_refuses_a_drain_shorter_than_the_slo() -> None:
    with pytest.raises(ValueError, match="drain_s"):
        _cap(drain_s=2.0)


def _step(index: int, rate: float, met: dict[str, list[int]]) -> dict[str, object]:
    arms = {a: ArmStep(met=m, finished=[1] * len(m), tokens=[10] * len(m)) for a, m in met.items()}
    return StepRecord(index=index, rate=rate, window_s=10.0, arms=arms).model_dump()


def _record(steps: list[dict[str, object]]) -> dict[str, object]:
    return {"rules": _cap().rules().model_dump(), "baseline": "a", "candidate": "b", "looks": 4,
            "steps": steps, "stop_reason": "test"}


def test_unmet_at_the_lowest_rate_gives_no_knee() -> None:
    finding = judge_capacity(_record([_step(0, 1.0, {"a": [0] * 30, "b": [0] * 30})]))
    assert finding.knees["a"].estimate is None
    assert "lowest rate" in finding.knees["a"].note
    assert finding.gates[0].outcome == "inconclusive"
    assert "no knee to compare" in finding.gates[0].reason


def test_a_clear_loss_of_capacity_fails_and_no_loss_passes() -> None:
    held, broke = [1] * 40, [0] * 40
    lost = _record([_step(0, 1.0, {"a": held, "b": held}), _step(1, 1.05, {"a": held, "b": broke}),
                    _step(2, 2.0, {"a": held, "b": broke}), _step(3, 2.1, {"a": broke, "b": broke})])
    finding = judge_capacity(lost)
    assert finding.gates[0].outcome == "fail", finding.gates[0].reason
    assert ("capacity.goodput", True, "fail", finding.gates[0].reason) in gate_rows(finding)
    same = _record([_step(0, 1.0, {"a": held, "b": held}), _step(1, 1.05, {"a": broke, "b": broke})])
    assert judge_capacity(same).gates[0].outcome == "pass"


def test_judging_a_record_again_gives_the_same_finding() -> None:
    record = _record([_step(0, 1.0, {"a": [1] * 20, "b": [1] * 18 + [0] * 2}),
                      _step(1, 1.5, {"a": [1] * 15 + [0] * 5, "b": [0] * 20})])
    assert judge_capacity(record) == judge_capacity(record)


def test_simulated_arms_a_third_less_capacity_fails() -> None:
    finding, record = simulate_stage(_cap(goodput={"allowed_relative": 0.1}), 2.0, 1.2, seed=3)
    assert finding.gates[0].outcome == "fail", (finding.gates[0].reason, record["stop_reason"])
    assert finding.knees["b"].estimate is not None
    assert finding.knees["a"].estimate is not None
    assert finding.knees["b"].estimate < finding.knees["a"].estimate


def test_simulated_equal_arms_do_not_fail() -> None:
    finding, _ = simulate_stage(_cap(goodput={"allowed_relative": 0.2}), 2.0, 2.0, seed=4)
    assert finding.gates[0].outcome != "fail"
    assert "requests/s within the SLO" in finding.sentence
