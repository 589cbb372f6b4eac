"""``abserve report RUN_ID --out DIR`` without ``--db`` / ``--policy``: it finds the run's store
under the runs folder and the policy the run was judged with, says which, and refuses to guess."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.model.provenance import RunProvenance
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
CPU_POLICY = ROOT / "configs/policy/cpu-default.yaml"


def make_store(folder: Path, run_id: str, provenance: dict[str, object] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "abserve.db"
    with Store.open(f"sqlite:///{db}") as store:
        info = run_info(run_id=run_id, status="running")
        info.provenance = RunProvenance.model_validate({**info.provenance.model_dump(), **(provenance or {})})
        store.create_run(info)
        store.write_exchanges([ex.model_copy(update={"run_id": run_id}) for ex in ab_run(70, seed=1)])
        store.finish_run(run_id, "completed")
    return db


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the policy files are looked for under configs/


def test_policy_from_the_report_abserve_run_wrote_beside_the_store(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    db = make_store(runs / "latest", "r1")
    first = tmp_path / "first"
    rc, text = invoke("report", "r1", "--db", f"sqlite:///{db}", "--out", str(first), "--policy",
                      str(ROOT / "configs/policy/default.yaml"))
    judged = json.loads((first / "report.json").read_text())
    judged["policy"]["name"] = "as-judged"  # the one the run was judged with, told apart by name
    (db.parent / "report.json").write_text(json.dumps(judged))
    rc, text = invoke("report", "r1", "--out", str(tmp_path / "again"), "--runs", str(runs))
    assert rc == 0, text
    assert f"store: {db}" in text
    assert "policy: as-judged from the run's report" in text
    again = json.loads((tmp_path / "again" / "report.json").read_text())
    assert again["provenance"]["policy_name"] == "as-judged"


def test_policy_from_the_digest_the_run_recorded(tmp_path: Path) -> None:
    digest = hashlib.sha256(CPU_POLICY.read_bytes()).hexdigest()
    runs = tmp_path / "runs"
    db = make_store(runs / "a" / "b", "r2", {"policy_sha256": digest})
    rc, text = invoke("report", "r2", "--out", str(tmp_path / "out"), "--runs", str(runs))
    assert "policy: cpu-default from configs/policy/cpu-default.yaml" in text, text
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["provenance"]["policy_name"] == "cpu-default"
    assert rc == data["exit_code"]
    rc, text = invoke("report", "r2", "--out", str(tmp_path / "out2"), "--db", f"sqlite:///{db}")
    assert f"store: sqlite:///{db}; policy: cpu-default from configs/policy/cpu-default.yaml" in text


def test_no_silent_default_and_clear_errors(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_store(runs / "x", "r3", {"policy_sha256": "0" * 64})
    rc, text = invoke("report", "r3", "--out", str(tmp_path / "o"), "--runs", str(runs))
    assert rc == 4
    assert "cannot tell which policy run 'r3' was judged with" in text
    assert "--policy" in text
    assert not (tmp_path / "o").exists()
    rc, text = invoke("report", "nope", "--out", str(tmp_path / "o"), "--runs", str(runs))
    assert rc == 4
    assert "no store under" in text
    assert "holds run 'nope'" in text
    make_store(runs / "y", "r3")
    rc, text = invoke("report", "r3", "--out", str(tmp_path / "o"), "--runs", str(runs))
    assert rc == 4
    assert "several stores" in text
    rc, text = invoke("report", "r3", "--out", str(tmp_path / "o"), "--runs", str(tmp_path / "none"))
    assert rc == 4
    assert "no runs folder" in text


def test_a_foreign_sqlite_file_is_only_read(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    foreign = runs / "other.db"
    runs.mkdir()
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    before = foreign.read_bytes()
    db = make_store(runs / "latest", "r4")
    rc, text = invoke("report", "r4", "--out", str(tmp_path / "o"), "--runs", str(runs), "--policy",
                      str(CPU_POLICY))
    assert f"store: {db}" in text
    assert "(--policy)" in text
    assert rc in (0, 1, 2, 3)
    assert foreign.read_bytes() == before
