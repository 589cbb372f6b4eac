"""A load that completed with a few failed requests is not an aborted load (compose defect 2).

Locust exits 1 whenever any request failed (``--exit-code-on-error``), even one below the
policy's allowed error rate; ``abserve run`` used to read that exit code plus the stop reason
``completed`` as "load stopped" and threw the run away. Only a stop reason other than
``completed`` aborts a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.traffic.runner import LoadSummary


def summary(exit_code: int, stop_reason: str | None, failures: int) -> LoadSummary:
    return LoadSummary(run_id="r", profile="p", requests_sent=100, failures=failures,
                       timings_path=Path("t"), stop_reason=stop_reason, exit_code=exit_code,
                       out_dir=Path("o"), log_path=Path("l"))


def test_one_failed_request_below_the_allowed_rate_does_not_abort() -> None:
    assert summary(1, "completed", failures=1).abort_reason is None


@pytest.mark.parametrize("reason", ["error_rate", "setup: no /tokenize"])
def test_an_aborted_load_says_why(reason: str) -> None:
    assert summary(3, reason, failures=30).abort_reason == reason


def test_a_clean_load_does_not_abort() -> None:
    assert summary(0, "completed", failures=0).abort_reason is None
