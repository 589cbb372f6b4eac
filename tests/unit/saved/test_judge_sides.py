"""Judging sides built from ``SavedRun`` objects (any reader's shape): equality by prompt in the
report, the sides' error rates, and the report's files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from abserve.compare.policy import Policy
from abserve.report import write_report
from abserve.saved.collect import Sides, fold_run
from abserve.saved.judge import judge_sides
from abserve.saved.matching import OutputMatcher
from abserve.saved.model import SavedRequest, SavedRun, SavedRunHeader


def saved(seed: int, n: int = 200, diverge: int | None = None, failed: int = 0,
          factor: float = 1.0) -> SavedRun:
    rng = np.random.default_rng(seed)

    def requests() -> Iterator[SavedRequest]:
        for i in rng.permutation(n):  # another order on every run: matching is by prompt
            ids = (1, 2, 3, 4) if i != diverge else (1, 2, 9, 4)
            yield SavedRequest(ok=i >= failed, ttft=0.05 * factor * rng.lognormal(0, 0.2),
                               tpot=0.01 * factor * rng.lognormal(0, 0.2), e2e=0.3 * rng.lognormal(0, 0.2),
                               prompt_key=f"p{i}", output_token_ids=ids, output_tokens=4,
                               error=None if i >= failed else "HTTP 500")

    return SavedRun(SavedRunHeader(tool="aiperf", source=f"run-{seed}.jsonl", model="m", duration_s=10.0),
                    requests())


def sides(base: list[SavedRun], cand: list[SavedRun]) -> Sides:
    m = OutputMatcher()
    b = [fold_run(r, m, "baseline") for r in base]
    return Sides(b, [fold_run(r, m, "candidate") for r in cand], m)


def test_a_divergent_output_is_reported_with_its_position(tmp_path: Path) -> None:
    j = judge_sides(sides([saved(1), saved(2)], [saved(3, diverge=17), saved(4)]), Policy())
    assert j.equality[0].summary.mismatches == 1
    assert j.equality[0].comparable == 400
    assert j.equality[0].by_position == {"2": 1}
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "fail"
    assert j.verdict == "fail"
    write_report(j, tmp_path)
    first = json.loads((tmp_path / "report.json").read_text())["summary"]["sentences"]
    assert any("Outputs differ on 1 of 400" in s["text"] and "position 2" in s["text"] for s in first)
    assert "prompt p17" in (tmp_path / "report.html").read_text()


def test_a_side_with_too_many_errors_is_invalid() -> None:
    j = judge_sides(sides([saved(1, failed=40)], [saved(2)]), Policy())
    assert j.verdict == "invalid"
    assert "the baseline side failed 40/200" in j.invalid_reasons[0]


def test_one_run_per_side_with_equal_outputs_is_at_most_inconclusive() -> None:
    j = judge_sides(sides([saved(1)], [saved(2)]), Policy())
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "pass"
    assert j.verdict == "inconclusive"
    assert j.unpaired is not None
    assert j.unpaired.design == "single-run"
