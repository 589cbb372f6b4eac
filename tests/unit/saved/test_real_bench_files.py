"""``abserve compare`` on files recorded by the real ``vllm bench serve`` (tests/fixtures/saved/
README.md has the command): the tool's own format reads, a known slowdown fails, and the
one-run-per-side rule holds on real noise."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from abserve.cli import app
from abserve.saved.collect import read_sides

FIXTURES = Path(__file__).parents[2] / "fixtures" / "saved"
BASE1, BASE2, SLOW = (str(FIXTURES / f"vllm-bench-{n}.json") for n in ("base-1", "base-2", "slow-1"))


def test_the_real_files_fold_into_runs() -> None:
    sides = read_sides([BASE1, BASE2], [SLOW], None)
    run = sides.baseline[0]
    assert run.header.model == "tiny-llava"
    assert run.header.tool == "vllm-bench"
    assert (run.requests, run.failed) == (40, 0)
    assert {m: v.size for m, v in run.values.items() if m != "itl"} == {"ttft": 40, "tpot": 40, "e2e": 40}
    assert run.values["itl"].size > 400
    assert "not the prompts" in (sides.matcher.not_measured() or "")


def test_the_slow_mutant_fails_and_one_run_per_side_never_passes(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", "--baseline", BASE1, "--candidate", SLOW,
                                      "--out", str(tmp_path / "ab")])
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "ab" / "report.json").read_text())
    tpot = next(m for m in report["metrics"] if m["name"] == "tpot.hl")
    assert tpot["outcome"] == "fail"
    assert tpot["estimate"] > 0.005  # the mutant's 5 ms a step
    result = CliRunner().invoke(app, ["compare", "--baseline", BASE1, "--candidate", BASE2,
                                      "--out", str(tmp_path / "aa")])
    assert result.exit_code in (1, 2), result.output  # never a pass; real noise may exceed the 12%


def test_aiperf_runs_are_matched_by_prompt_and_said_so(tmp_path: Path) -> None:
    """AIPerf saves prompts and outputs: equality is measured by prompt, and the first screen
    says how (not the paired run's "bitwise, logprobs included")."""
    run1, run2 = (str(FIXTURES / "aiperf" / n) for n in ("run1", "run2"))
    result = CliRunner().invoke(app, ["compare", "--baseline", run1, "--candidate", run2,
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output  # one run a side: never a pass
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["equality"][0]["comparable"] == 12
    first = " ".join(s["text"] for s in report["summary"]["sentences"])
    assert "matched by prompt, compared by character" in first
    assert "logprobs included" not in first
    assert "weaker than a paired abserve run" in first
