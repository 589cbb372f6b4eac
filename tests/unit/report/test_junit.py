"""``report/junit.py``: the one JUnit writer; critical cases and the verdict decide red or green,
a reported gate that did not pass is skipped, every outcome says why."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from abserve.report.junit import Case, junit_suite, verdict_case


def parsed(*cases: Case) -> ET.Element:
    return ET.fromstring(junit_suite("s", "abserve.r", list(cases)))


def test_a_pass_is_the_only_green_case() -> None:
    suite = parsed(Case("g", "pass", "within the allowance"))
    [case] = suite.iter("testcase")
    assert [child.tag for child in case] == ["properties", "system-out"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        ("1", "0", "0", "0")


@pytest.mark.parametrize("outcome", ["fail", "marginal", "inconclusive", "unstable"])
def test_undecided_and_failed_outcomes_are_failures_with_their_reason(outcome: str) -> None:
    suite = parsed(Case("g", outcome, "why"), Case("h", "pass", "ok"))
    case = next(c for c in suite.iter("testcase") if c.get("name") == "g")
    failure = case.find("failure")
    assert failure is not None
    assert case.find("skipped") is None
    assert failure.get("type") == outcome
    assert failure.get("message") == f"{outcome}: why"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")


def test_invalid_is_an_error() -> None:
    suite = parsed(Case("validity", "invalid", "arm b proved nothing"))
    error = suite.find("testcase/error")
    assert error is not None
    assert error.get("type") == "invalid"
    assert "proved nothing" in (error.get("message") or "")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")


def test_names_and_reasons_are_escaped() -> None:
    suite = parsed(Case('a <vs> "b"', "fail", "x < y & z"))
    case = suite.find("testcase")
    assert case is not None
    assert case.get("name") == 'a <vs> "b"'
    assert (case.findtext("failure") or "") == "x < y & z"


def props(case: ET.Element) -> dict[str, str | None]:
    return {p.get("name") or "": p.get("value") for p in case.iter("property")}


@pytest.mark.parametrize("outcome", ["fail", "marginal", "inconclusive", "unstable"])
def test_a_reported_gate_that_did_not_pass_is_skipped_with_its_reason_not_red(outcome: str) -> None:
    suite = parsed(Case("itl.hl", outcome, "slower between tokens", critical=False),
                   Case("tpot.hl", "pass", "ok"))
    case = next(c for c in suite.iter("testcase") if c.get("name") == "itl.hl")
    assert case.find("failure") is None
    assert case.find("error") is None
    skipped = case.find("skipped")
    assert skipped is not None
    assert skipped.get("message") == f"{outcome} (not critical): slower between tokens"
    assert props(case) == {"outcome": outcome, "critical": "false"}
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        ("2", "0", "0", "1")


def test_an_invalid_reported_gate_stays_an_error() -> None:
    suite = parsed(Case("itl.hl", "invalid", "no pairs", critical=False))
    assert suite.find("testcase/error") is not None
    assert (suite.get("errors"), suite.get("skipped")) == ("1", "0")


def test_a_critical_case_says_so_in_its_properties() -> None:
    case = parsed(Case("tpot.hl", "fail", "slower")).find("testcase")
    assert case is not None
    assert props(case) == {"outcome": "fail", "critical": "true"}


@pytest.mark.parametrize(("verdict", "child"), [("pass", "system-out"), ("marginal", "failure"),
                                                 ("fail", "failure"), ("invalid", "error")])
def test_the_verdict_case_is_red_unless_the_verdict_is_pass(verdict: str, child: str) -> None:
    case = parsed(verdict_case(verdict, ["itl.hl: marginal — slower, not critical"])).find("testcase")
    assert case is not None
    assert case.get("name") == "verdict"
    assert [c.tag for c in case][1] == child
    if verdict != "pass":
        assert "itl.hl: marginal" in (case.find(child).get("message") or "")  # type: ignore[union-attr]


def test_a_verdict_without_reasons_still_says_which() -> None:
    assert verdict_case("inconclusive", []).reason == "verdict inconclusive"
