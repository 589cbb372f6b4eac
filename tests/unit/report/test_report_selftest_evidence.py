"""The selftest's per-check reports show a correctness mutant's mismatches side by side: the check
is judged from the experiment's real SQLite store and its report is written with the stored
exchanges of the mismatching requests."""

from __future__ import annotations

from pathlib import Path

from tests.support.records_factory import ab_run, run_info

from abserve.compare import load_policy
from abserve.runs.selftest import judge_check
from abserve.runs.selftest_checks import CheckSpec, ExperimentOutcome
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]


def test_fail_equality_check_report_shows_the_outputs_side_by_side(tmp_path: Path) -> None:
    folder = tmp_path / "experiments" / "e"
    folder.mkdir(parents=True)
    with Store.open(f"sqlite:///{folder / 'abserve.db'}") as store:
        store.create_run(run_info(run_id="r1", status="running"))
        exchanges = ab_run(60, candidate_tokens={i: [1, 2, 3, 99, 98, 97, 96, 95] for i in range(20, 30)})
        store.write_exchanges([ex.model_copy(update={"run_id": "r1"}) for ex in exchanges])
        store.finish_run("r1", "completed")
    spec = CheckSpec.model_validate({"name": "mutant", "experiment": "e", "baseline": "a", "candidate": "b",
                                     "floor": None, "expect": "fail-equality"})
    experiment = ExperimentOutcome(name="e", config="x.yaml", out_dir=str(folder), run_id="r1")
    result = judge_check(spec, experiment, load_policy(ROOT / "configs/policy/selftest.yaml"), tmp_path)
    assert result.verdict == "fail"
    assert result.holds
    html = (tmp_path / "checks" / "mutant" / "report.html").read_text()
    assert 'id="mismatch-1"' in html
    assert '<mark title="position 3">t4</mark>' in html
    assert '<mark title="position 3">t99</mark>' in html
