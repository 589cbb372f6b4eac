"""``--summary-md FILE`` of ``abserve report`` and ``abserve run``: appended, links relative to
where the report is, also for a family sign-off and for a run refused before any report."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from tests.support.records_factory import ab_run, provenance, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import load_policy
from abserve.report.summary_file import SummaryTarget, target
from abserve.runs.orchestrator import write_signoff
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "configs/policy/default.yaml"


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    arms = {"a": provenance("linear"), "b": provenance("bisect"), "a2": provenance("linear")}
    with Store.open(url) as store:
        for run_id, shift in (("good", 0.0), ("slow", 0.003)):
            store.create_run(run_info(arms, run_id=run_id, status="running"))
            store.write_exchanges([ex.model_copy(update={"run_id": run_id})
                                   for ex in ab_run(70, itl_shift=shift, seed=2)])
            store.finish_run(run_id, "completed")
    return url


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_report_appends_the_summary_with_links_relative_to_the_summary(db: str, tmp_path: Path) -> None:
    summary = tmp_path / "ci" / "step-summary.md"
    summary.parent.mkdir()
    summary.write_text("## an earlier step\n")
    out = tmp_path / "runs" / "slow"
    rc, text = invoke("report", "slow", "--db", db, "--out", str(out), "--policy", str(POLICY),
                      "--summary-md", str(summary))
    assert rc == 1, text
    assert f"summary appended to {summary}" in text
    md = summary.read_text()
    assert md.startswith("## an earlier step\n\n### abserve sign-off `slow`: ❌ **FAIL** (exit 1)")
    assert "[report.html](../runs/slow/report.html)" in md
    rc, _ = invoke("report", "good", "--db", db, "--out", str(tmp_path / "runs" / "good"),
                   "--policy", str(POLICY), "--summary-md", str(summary),
                   "--summary-link-base", "https://ci.example/artifacts/good")
    assert rc == 0
    md = summary.read_text()
    assert md.count("### abserve sign-off") == 2  # appended, never overwritten
    assert "[report.md](https://ci.example/artifacts/good/report.md)" in md


def test_a_link_base_without_a_summary_is_refused(db: str, tmp_path: Path) -> None:
    rc, text = invoke("report", "good", "--db", db, "--out", str(tmp_path), "--policy", str(POLICY),
                      "--summary-link-base", "x")
    assert rc == 4
    assert "--summary-link-base applies with --summary-md only" in text
    with pytest.raises(ValueError, match="summary-md only"):
        target(None, "x")


def test_run_refused_still_writes_why_to_the_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    rc, text = invoke("run", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "out"),
                      "--summary-md", str(summary))
    assert rc == 4, text
    md = summary.read_text()
    assert md.startswith("### abserve run: ⛔ **run refused** (exit 4)\n\n")
    assert "missing.yaml" in md


def test_the_signoff_writes_the_summary_of_two_arms(db: str, tmp_path: Path) -> None:
    summary = SummaryTarget(tmp_path / "s.md")
    code = write_signoff(db, "slow", POLICY, tmp_path / "out", Console(quiet=True),
                         summary=summary)
    assert code == 1
    md = summary.file.read_text()
    assert "### abserve sign-off `slow`: ❌ **FAIL** (exit 1)" in md
    assert "[junit.xml](out/junit.xml)" in md


def test_the_signoff_of_a_family_writes_its_summary(db: str, tmp_path: Path) -> None:
    summary = SummaryTarget(tmp_path / "s.md", "https://ci.example/r")
    policy = load_policy(POLICY)
    code = write_signoff(db, "slow", POLICY, tmp_path / "out", Console(quiet=True), policy,
                         ("a", ["b", "a2"], None), summary)
    assert code == 1
    md = summary.file.read_text()
    assert md.startswith("### abserve family sign-off `slow`: ❌ **FAIL** (exit 1)")
    assert "[vs-b/report.html](https://ci.example/r/vs-b/report.html)" in md
    assert "- **a vs a2: PASS**" in md
    assert (tmp_path / "out" / "vs-b" / "report.md").is_file()
