"""Fewer hypothesis examples in ``make test-fast`` only; ``make test`` (CI) runs every one.

The edit-run loop's budget is 3 minutes of pytest; about a fifth of it went to the property
tests, whose counts (40 to 600 examples, set in each test's ``@settings``) are sized for CI.
When ``ABSERVE_EXAMPLES_DIVISOR`` is set (the Makefile's ``test-fast`` sets 4), each
hypothesis test runs ``max(MIN_EXAMPLES, n // divisor)`` examples (never more than its own
``n``); every other setting of the test is kept. Unset (``make test``, a plain pytest run),
nothing changes. Hypothesis draws new examples each run, so repeated fast runs still explore.
An explicit ``@settings`` overrides any profile, so the divisor is applied to the settings
hypothesis reads from the test at call time; a hypothesis that no longer keeps them there
fails the session (in one line) instead of silently running the full counts.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

ENV = "ABSERVE_EXAMPLES_DIVISOR"
MIN_EXAMPLES = 10
SETTINGS_ATTR = "_hypothesis_internal_use_settings"  # where @given's wrapper reads them per call


def divisor() -> int:
    """The divisor asked for (1: every example), with a one-line error for a bad value."""
    raw = os.environ.get(ENV, "").strip() or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise pytest.UsageError(f"{ENV}={raw!r}: expected a whole number >= 1")
    return int(raw)


def fewer(n: int, by: int) -> int:
    """The examples a test of ``n`` runs under divisor ``by``."""
    return min(n, max(MIN_EXAMPLES, n // by))


def pytest_report_header(config: pytest.Config) -> str | None:
    by = divisor()
    if by == 1:
        return None
    return f"hypothesis: 1/{by} of each test's examples (at least {MIN_EXAMPLES}; {ENV}, make test-fast)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    by = divisor()
    if by == 1:
        return
    done: set[int] = set()  # a parametrized test shares one function
    for item in items:
        test = getattr(item, "obj", None)
        if not getattr(test, "is_hypothesis_test", False) or id(test) in done:
            continue
        done.add(id(test))
        own = getattr(test, SETTINGS_ATTR, None)
        if not isinstance(own, settings):
            raise pytest.UsageError(f"{ENV}: hypothesis keeps no {SETTINGS_ATTR} on {item.nodeid}")
        setattr(test, SETTINGS_ATTR, settings(own, max_examples=fewer(own.max_examples, by)))
