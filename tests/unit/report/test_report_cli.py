"""``abserve report`` and ``abserve plan`` against a real SQLite store written by the store API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, provenance, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
POLICY = str(ROOT / "configs/policy/default.yaml")


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    with Store.open(url) as store:
        for run_id, shift, seed, arms in (
            ("good", 0.0, 1, None),
            ("slow", 0.003, 2, None),
            ("unproven", 0.0, 3, {"a": provenance("linear"), "b": provenance("bisect", proven=None)}),
        ):
            store.create_run(run_info(arms, run_id=run_id, status="running"))
            store.write_exchanges(
                [ex.model_copy(update={"run_id": run_id}) for ex in ab_run(70, itl_shift=shift, seed=seed)]
            )
            store.finish_run(run_id, "completed")
    return url


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("run_id", "code", "verdict"), [("good", 0, "pass"), ("slow", 1, "fail"), ("unproven", 3, "invalid")]
)
def test_report_exit_code_and_files(db: str, tmp_path: Path, run_id: str, code: int, verdict: str) -> None:
    out = tmp_path / run_id
    rc, text = invoke("report", run_id, "--db", db, "--out", str(out), "--policy", POLICY)
    assert rc == code, text
    assert f"verdict: {verdict}" in text
    data = json.loads((out / "report.json").read_text())
    assert data["verdict"] == verdict
    assert data["exchanges_warmup"] == 10
    prov = data["provenance"]
    assert prov["judged_by"]["abserve_version"]
    assert len(prov["config_sha256"]) == 64
    assert prov["arms"]["b"]["proven_lookup"] == ("bisect" if run_id != "unproven" else None)
    assert {p.name for p in out.iterdir()} == {"report.html", "report.md", "report.json", "junit.xml",
                                               "glossary.html"}


def test_report_with_baseline_run_side_by_side(db: str, tmp_path: Path) -> None:
    rc, _ = invoke(
        "report", "slow", "--db", db, "--out", str(tmp_path), "--baseline", "good", "--policy", POLICY
    )
    assert rc == 1
    assert "Side by side with baseline run" in (tmp_path / "report.html").read_text()


def test_report_errors_are_clear_and_exit_4(db: str, tmp_path: Path) -> None:
    rc, text = invoke("report", "nope", "--db", db, "--out", str(tmp_path), "--policy", POLICY)
    assert rc == 4
    assert "no run 'nope'" in text
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    rc, text = invoke("report", "good", "--db", missing, "--out", str(tmp_path), "--policy", POLICY)
    assert rc == 4
    assert "no store at" in text
    assert not (tmp_path / "missing.db").exists()
    rc, text = invoke(
        "report", "good", "--db", db, "--out", str(tmp_path), "--policy", str(tmp_path / "x.yaml")
    )
    assert rc == 4
    assert "cannot read" in text
    assert "x.yaml" in text


def test_plan_from_a_pilot_run(db: str) -> None:
    rc, text = invoke(
        "plan", "good", "--db", db, "--effect-relative", "0.01", "--mismatch-rate", "0.01", "--policy", POLICY
    )
    assert rc == 0, text
    assert "tpot: pilot 60 pairs" in text
    assert "161 requests" in text
    rc, text = invoke("plan", "good", "--db", db, "--metric", "bogus", "--effect-ms", "1", "--policy", POLICY)
    assert rc == 4
    assert "unknown metric" in text
