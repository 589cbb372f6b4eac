"""``report/junit.py``: the one JUnit writer; only a pass is green, every other outcome says why."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from abserve.report.junit import Case, junit_suite


def parsed(*cases: Case) -> ET.Element:
    return ET.fromstring(junit_suite("s", "abserve.r", list(cases)))


def test_a_pass_is_the_only_green_case() -> None:
    suite = parsed(Case("g", "pass", "within the allowance"))
    [case] = suite.iter("testcase")
    assert [child.tag for child in case] == ["system-out"]
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
