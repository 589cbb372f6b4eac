"""``tests.support.fast_examples``: ``make test-fast`` runs 1/4 of each hypothesis test's examples,
``make test`` and a plain run all of them (an inner pytest session in this process counts them).
"""

from __future__ import annotations

import re

import pytest
from tests.support.fast_examples import ENV, MIN_EXAMPLES, fewer

CASES = '''
from hypothesis import given, settings, strategies as st
import pytest

SEEN = {"explicit": 0, "default": 0, "param": 0}

@settings(max_examples=80, deadline=None, database=None)
@given(st.integers())
def test_explicit(x):
    SEEN["explicit"] += 1

@settings(database=None)
@given(st.integers())
def test_default(x):
    SEEN["default"] += 1

@pytest.mark.parametrize("k", [1, 2])
@settings(max_examples=40, database=None)
@given(st.integers())
def test_param(k, x):
    SEEN["param"] += 1

def test_report():
    print("SEEN", SEEN["explicit"], SEEN["default"], SEEN["param"])
'''


def counts(pytester: pytest.Pytester) -> list[int]:
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest("-p", "tests.support.fast_examples", "-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=5)
    seen = re.search(r"SEEN (\d+) (\d+) (\d+)", result.stdout.str())
    assert seen is not None, result.stdout.str()
    return [int(v) for v in seen.groups()]


def test_unset_every_example_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert counts(pytester) == [80, 100, 80]


def test_the_fast_lane_runs_a_quarter(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "4")
    assert counts(pytester) == [20, 25, 20]  # each parameter of test_param runs 10


@pytest.mark.parametrize(("n", "by", "runs"), [(600, 4, 150), (40, 4, MIN_EXAMPLES), (15, 4, MIN_EXAMPLES),
                                               (5, 4, 5), (300, 1, 300)])
def test_fewer_keeps_a_floor_and_never_adds(n: int, by: int, runs: int) -> None:
    assert fewer(n, by) == runs


def test_a_bad_divisor_is_one_line(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "quarter")
    pytester.makepyfile(test_cases="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "tests.support.fast_examples", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {ENV}='quarter': expected a whole number >= 1"])
