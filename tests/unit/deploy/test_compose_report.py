"""The compose report of a run with several candidate arms is the family's, as under ``abserve run``.

``abserve.deploy.compose_report`` (what docker/run-report.sh ends with when the run has arms
beyond a, b and a2) runs on a real SQLite store of synthetic exchanges: with two candidates it
writes the family's report (Holm-corrected, ``vs-<candidate>/`` reports) and exits with the
family's code; with one it is ``abserve report`` itself; docker/run-report.sh picks it for
extra arms only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.support.records_factory import arm, exchange, provenance, run_info
from tests.unit.deploy.test_compose_scripts import calls, fake

from abserve.deploy.compose_report import family_of_run, main
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "configs" / "policy" / "default.yaml"
ROLES = {"a": "baseline", "b": "candidate", "hybrid": "candidate"}


def store_with(tmp_path: Path, roles: dict[str, str]) -> str:
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    with Store.open(url) as store:
        run = run_info({name: provenance("linear") for name in roles}, run_id="r3")
        run.config = {"arms": {name: {"url": f"http://vllm-{name}:8000", "role": role}
                               for name, role in roles.items()}, "primary": "a"}
        store.create_run(run)
        store.write_exchanges([exchange(i, [arm(name) for name in roles], run_id="r3") for i in range(40)])
    return url


def test_the_family_is_read_from_the_roles_the_router_recorded() -> None:
    config = {"arms": {name: {"role": role} for name, role in ROLES.items()}}
    assert family_of_run(config) == ("a", ["b", "hybrid"], None)
    config["arms"]["a2"] = {"role": "noise_floor"}
    assert family_of_run(config) == ("a", ["b", "hybrid"], "a2")
    assert family_of_run({"arms": {"a": {"role": "baseline"}, "b": {"role": "candidate"}}}) is None
    assert family_of_run({}) is None


def test_two_candidates_get_the_family_report_with_holm(tmp_path: Path) -> None:
    url = store_with(tmp_path, ROLES)
    out = tmp_path / "report"
    code = main(["r3", "--db", url, "--out", str(out), "--policy", str(POLICY)])
    family = json.loads((out / "report.json").read_text())
    assert code == family["exit_code"]
    assert set(family["candidates"]) == {"b", "hybrid"}
    assert family["baseline"] == "a"
    assert "Holm" in family["correction"]
    for name in ("b", "hybrid"):
        assert (out / f"vs-{name}" / "report.json").is_file(), name
    assert "vs-hybrid/report.md" in (out / "report.md").read_text()


def test_one_candidate_is_abserve_report_itself(tmp_path: Path) -> None:
    url = store_with(tmp_path, {"a": "baseline", "b": "candidate"})
    out = tmp_path / "report"
    with pytest.raises(SystemExit) as info:
        main(["r3", "--db", url, "--out", str(out), "--policy", str(POLICY)])
    report = json.loads((out / "report.json").read_text())
    assert info.value.code == report["exit_code"]
    assert not (out / "vs-b").exists()


def test_an_unreadable_store_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    code = main(["r3", "--db", f"sqlite:///{tmp_path / 'none.db'}", "--out", str(tmp_path / "o"),
                 "--policy", str(POLICY)])
    assert code == 4


FAMILY = ["python", "-m", "abserve.deploy.compose_report"]


@pytest.mark.parametrize(("arms", "judge"), [("a b a2", ["abserve", "report"]), ("a b hybrid", FAMILY)])
@pytest.mark.process
def test_run_report_uses_the_family_judgment_only_for_extra_arms(tmp_path: Path, arms: str,
                                                                 judge: list[str]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "abserve")
    fake(bin_dir, "python")
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
           "ABSERVE_TELEMETRY_ROOT": str(tmp_path / "telemetry"), "ABSERVE_ARMS": arms,
           "ABSERVE_ARM_LOOKUPS": "a=linear b=bisect a2=linear hybrid=hybrid"}
    result = subprocess.run(["sh", str(ROOT / "docker" / "run-report.sh"), "r1", "--db", "sqlite:///x.db",
                             "--out", "/reports/r1", "--policy", "p.yaml"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    last = calls(log)[-1]
    assert last[:len(judge)] == judge
    assert last[len(judge):] == ["r1", "--db", "sqlite:///x.db", "--out", "/reports/r1", "--policy", "p.yaml"]
