"""One error limit: ``abserve load --max-error-rate``, the load process's and every policy's
default are ``abserve.base.limits.MAX_ERROR_RATE`` (0.02), and a bounded load stops only once its
failures are past that share of all it will send (one early failure does not end a long run)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from abserve.base.limits import MAX_ERROR_RATE
from abserve.cli import load as commands
from abserve.compare.policy import Policy
from abserve.traffic.run_state import RunOptions, RunState
from abserve.traffic.runner import LoadSpec

ROOT = Path(__file__).resolve().parents[3]


def test_every_default_is_the_policies_limit() -> None:
    assert MAX_ERROR_RATE == 0.02
    cli = inspect.signature(commands.load).parameters["max_error_rate"].default
    assert cli == MAX_ERROR_RATE
    assert LoadSpec("p", "http://h", run_id="r", out_dir=Path("x")).max_error_rate == MAX_ERROR_RATE
    assert Policy().max_error_rate == MAX_ERROR_RATE
    for path in sorted((ROOT / "configs" / "policy").glob("*.yaml")):
        said = yaml.safe_load(path.read_text()).get("max_error_rate", MAX_ERROR_RATE)
        assert said == MAX_ERROR_RATE, path


def state(tmp_path: Path, requests: int, duration: float = 0.0) -> RunState:
    options = RunOptions(host="http://127.0.0.1:9", profile="", overrides={}, corpus_path=None,
                         requests=requests, duration=duration, corpus_size=0, shape="closed", rate=0.0,
                         steps=0, sweep_rates=[], seed=None, run_id="r", out_dir=tmp_path,
                         max_error_rate=MAX_ERROR_RATE, min_requests=10, model="m", tokenize_url="",
                         timeout_s=5.0)
    return RunState(options, [object()] * max(requests, 1), None)  # type: ignore[list-item]


@pytest.mark.parametrize(("requests", "sent", "failures", "stops"), [
    (500, 20, 1, False),  # 1 of 500 planned: the run can still end at 0.2 %
    (500, 20, 10, False),  # 10 of 500 is exactly the limit
    (500, 20, 11, True),  # 11 of 500: past 2 % whatever the rest does
    (500, 9, 11, False),  # fewer than min_requests sent: not judged yet
])
def test_a_bounded_load_stops_once_it_cannot_end_under_the_limit(
        tmp_path: Path, requests: int, sent: int, failures: int, stops: bool) -> None:
    s = state(tmp_path, requests)
    s.sent, s.failures = sent, failures
    assert s.planned == requests
    assert s.error_rate_exceeded() is stops
    s.close()


def test_a_timed_load_judges_what_it_sent(tmp_path: Path) -> None:
    s = state(tmp_path, 0, duration=60.0)
    assert s.planned == 0
    s.sent, s.failures = 100, 2
    assert not s.error_rate_exceeded()
    s.failures = 3
    assert s.error_rate_exceeded()
    s.close()
