"""A load stopped at its error limit still leaves a report (issue 57, item 6).

``abserve run`` on two ``url:`` arms that are fake vLLM servers answering every request with
HTTP 500 (no vLLM here: the load, the router and the orchestrator are the real processes).
The load passes its error-rate limit and stops; the run must exit 6 as before, and write an
INVALID report (report.html, .md, .json, junit.xml) and the ``--summary-md`` that say why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.integration.test_run_killed import experiment as killed_experiment
from tests.support.fake_upstream import Knobs
from tests.support.tokenizing_upstream import TokenizingUpstream

pytestmark = [pytest.mark.server, pytest.mark.timeout(180)]
REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, urls: list[str]) -> Path:
    """test_run_killed's two ``url:`` arms, with 60 requests allowed 10% errors."""
    path = killed_experiment(tmp_path, urls)
    config = yaml.safe_load(path.read_text())
    config["load"]["max_error_rate"] = 0.1
    config["load"]["profiles"][0]["requests"] = 60
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def failing_arms() -> Iterator[list[str]]:
    knobs = Knobs(n_tokens=8, status=500)
    with TokenizingUpstream(knobs) as a, TokenizingUpstream(knobs) as b:
        yield [a.url, b.url]


def test_a_load_stopped_at_its_error_limit_exits_6_with_an_invalid_report(
        tmp_path: Path, failing_arms: list[str]) -> None:
    out, summary = tmp_path / "out", tmp_path / "summary.md"
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
    done = subprocess.run(
        [sys.executable, "-m", "abserve", "run", str(experiment(tmp_path, failing_arms)), "--out", str(out),
         "--summary-md", str(summary)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=170)
    said = done.stdout + done.stderr
    assert done.returncode == 6, said
    for name in ("report.html", "report.md", "report.json", "junit.xml"):
        assert (out / name).is_file(), f"no {name}: {said}"
    verdict = json.loads((out / "report.json").read_text())
    assert (verdict["verdict"], verdict["exit_code"]) == ("invalid", 6)
    why = [r for r in verdict["invalid_reasons"] if "error-rate limit (exit 6)" in r]
    assert why, verdict["invalid_reasons"]
    assert "load many-items stopped: error_rate (" in why[0], why
    assert "error-rate limit" in (out / "report.md").read_text()
    assert "error-rate limit" in (out / "junit.xml").read_text()
    assert "**INVALID** (exit 6)" in summary.read_text(), summary.read_text()
