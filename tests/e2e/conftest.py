"""Fixtures of the end-to-end runs: a run left behind by a failed assertion is stopped."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import psutil
import pytest
from tests.e2e.test_run_cli import processes_marked


@pytest.fixture
def run_marker() -> Iterator[str]:
    """The ``E2E_MARKER`` of this test's run. Whatever still carries it when the test ends (an
    ``abserve run`` orphaned by a failed assertion, with its servers, router and Locust) is
    killed by PID, so one failure does not keep loading the machine under the next tests."""
    marker = f"e2e-{os.getpid()}-{time.time_ns()}"
    yield marker
    for proc in processes_marked(marker):
        with contextlib.suppress(psutil.Error):
            proc.kill()
