"""The capacity stage in the judgment and the report (issue 59): its gates join the verdict, the
report shows the chart, the tables and a first-screen sentence; a run without one is unchanged."""

from __future__ import annotations

from pathlib import Path

from tests.support.records_factory import provenance, run_info
from tests.support.stall_runs import run

from abserve.compare import judge, load_policy
from abserve.compare.capacity import ArmStep, StepRecord
from abserve.compare.capacity_search import CapacityConfig
from abserve.compare.model import Judgment
from abserve.compare.policy import ArmRoles
from abserve.report import write_report

ROOT = Path(__file__).resolve().parents[3]
POLICY = load_policy(ROOT / "configs/policy/aa-default.yaml").model_copy(
    update={"arms": ArmRoles(baseline="a", candidate="b", floor=None)})


def _record(lost: bool) -> dict[str, object]:
    held, broke = [1] * 40, [0] * 40

    def step(i: int, rate: float, a: list[int], b: list[int]) -> dict[str, object]:
        return StepRecord(index=i, rate=rate, window_s=20.0, arms={
            name: ArmStep(met=m, finished=[1] * 40, tokens=[24] * 40, in_window=[1] * 40)
            for name, m in (("a", a), ("b", b))}).model_dump()

    cap = CapacityConfig.model_validate({"slo": {"e2e_s": 6.0}, "start_rate": 1.0, "bootstrap": 100,
                                         "goodput": {"allowed_relative": 0.15}})
    b_mid = broke if lost else held
    return {"rules": cap.rules().model_dump(), "baseline": "a", "candidate": "b", "looks": 6,
            "steps": [step(0, 1.0, held, held), step(1, 1.1, held, b_mid), step(2, 2.0, held, b_mid),
                      step(3, 2.2, broke, broke)], "stop_reason": "every capacity gate decided"}


def _judged(record: dict[str, object] | None) -> Judgment:
    info = run_info({"a": provenance("linear"), "b": provenance("linear")})
    info.provenance.capacity = record
    return judge(info, run(60), POLICY)


def test_a_lost_knee_fails_the_run_and_the_report_shows_it(tmp_path: Path) -> None:
    j = _judged(_record(lost=True))
    assert j.capacity is not None
    assert j.verdict == "fail"
    assert any(r.startswith("capacity.goodput: fail") for r in j.reasons)
    paths = write_report(j, tmp_path)
    html, md = paths.html.read_text(), paths.markdown.read_text()
    assert 'id="capacity-chart"' in html
    assert "knee a 2" in html
    assert "### Capacity" in md
    assert "capacity.goodput | " in md
    assert "The candidate carries 1.0" in md  # the first screen's sentence


def test_a_run_without_a_capacity_stage_has_no_capacity_key(tmp_path: Path) -> None:
    j = _judged(None)
    assert j.capacity is None
    assert "capacity" not in j.model_dump()
    assert 'id="capacity"' not in write_report(j, tmp_path).html.read_text()


def test_equal_knees_pass_the_capacity_gate() -> None:
    j = _judged(_record(lost=False))
    assert j.capacity is not None
    assert j.capacity["gates"][0]["outcome"] == "pass"
