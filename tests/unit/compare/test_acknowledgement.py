"""A run whose router answered before storing (``acknowledge: before_store``) says so on the
report's first screen; the default (``stored``) and older runs say nothing."""

from __future__ import annotations

from tests.support.records_factory import arm, exchange, run_info

from abserve.compare import judge, load_policy
from abserve.compare.acknowledgement import acknowledgement_statement
from abserve.model.records import RunInfo
from abserve.report.views import story

POLICY = load_policy("configs/policy/default.yaml")


def with_ack(acknowledge: str | None) -> RunInfo:
    run = run_info({})
    config: dict[str, object] = {"primary": "a"}
    if acknowledge is not None:
        config["acknowledge"] = acknowledge
    run.config = config
    return run


def test_only_before_store_is_stated() -> None:
    assert acknowledgement_statement(with_ack("stored")) is None
    assert acknowledgement_statement(with_ack(None)) is None
    text = acknowledgement_statement(with_ack("before_store"))
    assert text is not None
    assert "before their exchanges were stored" in text


def test_the_first_screen_says_a_run_used_it() -> None:
    exchanges = [exchange(i, [arm("a", ttft=0.05, itl=0.01), arm("b", ttft=0.05, itl=0.01)],
                          started_at=1_000.0 + i) for i in range(40)]
    fast = story(judge(with_ack("before_store"), exchanges, POLICY))
    safe = story(judge(with_ack("stored"), exchanges, POLICY))
    assert fast.placement is not None
    assert "acknowledge: before_store" in fast.placement
    assert safe.placement is None or "before_store" not in safe.placement
