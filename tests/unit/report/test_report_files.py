"""Report files: all four written, strict JSON that round-trips, JUnit (verdict, gates), escaped HTML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, arm, position, provenance, run_info

from abserve.compare import Judgment, Policy, judge
from abserve.compare.policy import MetricRule
from abserve.report import write_report

SWAP = [1, 2, 3, 99, 98, 97, 96, 95]


def judged(**kw: object) -> Judgment:
    return judge(run_info(), ab_run(60, **kw), Policy())  # type: ignore[arg-type]


def test_all_five_files_and_strict_round_trippable_json(tmp_path: Path) -> None:
    j = judged(candidate_tokens={4: SWAP})
    paths = write_report(j, tmp_path / "out")
    for p in (paths.html, paths.markdown, paths.json, paths.junit, paths.glossary):
        assert p.is_file()
        assert p.stat().st_size > 200
    text = paths.json.read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["schema_version"] == 1
    assert data["verdict"] == j.verdict
    assert data["arms"]["b"]["proven_lookup"] == "bisect"
    assert data["equality"][0]["summary"]["counts"]["divergent"] == 1
    assert {"estimate", "low", "high", "threshold", "outcome", "reason"} <= data["metrics"][0].keys()
    assert data["provenance"]["git_commit"] == "deadbeef"
    assert Judgment.model_validate(data).verdict == j.verdict


@pytest.mark.parametrize(
    ("kw", "verdict", "code"),
    [
        ({}, "pass", 0),
        ({"itl_shift": 0.003}, "fail", 1),
        ({"candidate_tokens": {5: SWAP}}, "marginal", 2),
    ],
)
def test_exit_code_follows_the_verdict(tmp_path: Path, kw: dict, verdict: str, code: int) -> None:
    paths = write_report(judged(**kw), tmp_path)
    assert (paths.verdict, paths.exit_code) == (verdict, code)


def test_invalid_run_exits_3_and_junit_reports_an_error(tmp_path: Path) -> None:
    info = run_info({"a": provenance("linear"), "b": provenance("bisect", proven=None)})
    paths = write_report(judge(info, ab_run(60), Policy()), tmp_path)
    assert paths.exit_code == 3
    suite = ET.parse(paths.junit).getroot()
    errors = {c.get("name"): c.find("error") for c in suite.iter("testcase") if c.find("error") is not None}
    assert set(errors) == {"verdict", "validity"}  # invalid stays an error, never a skip
    assert suite.get("errors") == "2"
    assert "proved nothing" in (errors["validity"].get("message") or "")  # type: ignore[union-attr]


def cases_with(suite: ET.Element, child: str) -> set[str | None]:
    return {c.get("name") for c in suite.iter("testcase") if c.find(child) is not None}


def test_junit_has_the_verdict_and_one_case_per_gate_with_failures(tmp_path: Path) -> None:
    j = judged(itl_shift=0.003)
    assert j.verdict == "fail"
    suite = ET.parse(write_report(j, tmp_path).junit).getroot()
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names == ["verdict", "validity", "equality", *[m.name for m in j.metrics]]
    failed = cases_with(suite, "failure")
    critical = {m.name for m in j.metrics if m.outcome != "pass" and m.critical}
    assert failed == {"verdict"} | critical  # critical gates and the verdict decide red
    assert "tpot.hl" in failed
    reported = {m.name for m in j.metrics if m.outcome != "pass" and not m.critical}
    assert cases_with(suite, "skipped") == reported
    assert suite.get("failures") == str(len(failed))


def test_a_passing_run_is_green_with_its_reported_gates_skipped(tmp_path: Path) -> None:
    reported = MetricRule(metric="ttft", allowed_relative=0.0)  # not critical; its interval spans 0
    j = judge(run_info(), ab_run(60), Policy(metrics=(MetricRule(metric="tpot", critical=True), reported)))
    ttft = next(m for m in j.metrics if m.name == "ttft.hl")
    assert (j.verdict, ttft.outcome, ttft.critical) == ("pass", "inconclusive", False)
    suite = ET.parse(write_report(j, tmp_path).junit).getroot()
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "1")
    skipped = next(c for c in suite.iter("testcase") if c.get("name") == "ttft.hl").find("skipped")
    assert skipped is not None
    assert skipped.get("message") == f"inconclusive (not critical): {ttft.reason}"


def test_model_text_in_the_html_is_escaped(tmp_path: Path) -> None:
    runs = ab_run(40)
    evil = [position(7) for _ in range(8)]
    for p in evil:
        p.token = "<script>alert(1)</script>"
    runs[0].arms["b"] = arm("b", [7] * 8, logprobs=evil)
    html = write_report(judge(run_info(), runs, Policy()), tmp_path).html.read_text()
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)" in html


def test_html_needs_no_network(tmp_path: Path) -> None:
    html = write_report(judged(), tmp_path).html.read_text()
    urls = set(re.findall(r"""(?:src|href)=["']([^"']+)""", html))
    anchors = {u for u in urls if u.startswith("#")}  # links to the evidence on the same page
    terms = {u for u in urls if u.startswith("glossary.html")}  # the glossary written beside it
    assert urls - anchors - terms <= {"data:,"}
    assert all(f'id="{a[1:]}"' in html for a in anchors)  # each link lands on an element
    glossary = (tmp_path / "glossary.html").read_text()
    assert all(f'id="{t.partition("#")[2]}"' in glossary for t in terms if "#" in t)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html)
    assert "<script" not in html


def test_markdown_for_a_pull_request_with_baseline_side_by_side(tmp_path: Path) -> None:
    base = judge(run_info(run_id="rc1"), ab_run(60, seed=9), Policy())
    md = write_report(judged(itl_shift=0.003), tmp_path, baseline=base).markdown.read_text()
    assert md.startswith("## abserve sign-off: `run-1` — **FAIL** (exit 1)")
    assert "| tpot.hl (critical) |" in md
    assert "Side by side with `rc1` (pass)" in md
    assert "&#" not in md
    assert "&lt;" not in md
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["baseline_run"]["run_id"] == "rc1"


def test_unmeasured_floor_is_stated(tmp_path: Path) -> None:
    info = run_info({"a": provenance("linear"), "b": provenance("bisect")})
    paths = write_report(judge(info, ab_run(60, arms=("a", "b")), Policy()), tmp_path)
    assert "noise floor was not measured" in paths.html.read_text()
    assert "noise floor was not measured" in paths.markdown.read_text()
