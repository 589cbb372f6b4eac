"""The family sign-off's ``report.md`` and ``junit.xml`` (``abserve.report.family_md``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tests.support.records_factory import provenance, run_info
from tests.unit.compare.test_family import POLICY, three_candidates

from abserve.compare.family import FamilyJudgment, judge_family
from abserve.model.records import RunInfo
from abserve.report.family_md import family_junit, family_markdown


def judged() -> tuple[RunInfo, FamilyJudgment]:
    run = run_info({name: provenance("linear") for name in ("a", "b", "c", "h")})
    return run, judge_family(run, three_candidates(), POLICY, "a", ["b", "c", "h"], None)


def test_the_markdown_has_one_line_per_candidate_and_shifts_in_signed_ms() -> None:
    run, family = judged()
    md = family_markdown(family, run)
    assert md.startswith("# abserve sign-off: run-1\n\n**Verdict: FAIL** (exit 1)")
    assert "| c | fail | 0.01667 | 0.9833 | 1 | [vs-c/report.md](vs-c/report.md) |" in md
    assert "| b | pass |" in md
    assert "| h | pass |" in md
    assert "| +3.000 [+3.000, +3.000] |" in md  # c: 3 ms per token slower, no unit in the cell
    assert "| -2.000 [-2.000, -2.000] | **h** (clear) |" in md


def test_the_junit_has_the_verdict_and_one_case_per_candidate_only_a_pass_green() -> None:
    _, family = judged()
    suite = ET.fromstring(family_junit(family, "r1").split("\n", 1)[1])
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("abserve family", "4", "2")
    cases = {c.get("name"): c for c in suite}
    assert set(cases) == {"verdict", "a vs b", "a vs c", "a vs h"}
    assert cases["verdict"].find("failure") is not None  # the family fails: c is slower
    assert cases["a vs c"].find("failure") is not None
    assert cases["a vs b"].find("failure") is None
    assert cases["a vs b"].find("error") is None
