"""Primary pacing (``compare/pacing.py``): the queue a ``client_waits_for: primary`` router makes
is measured from the records, stated, and keeps a latency regression from failing the run."""

from __future__ import annotations

from tests.support.records_factory import arm, exchange, run_info

from abserve.compare import judge, load_policy
from abserve.compare.pacing import pacing_statement, peak_in_flight
from abserve.model.records import Exchange, RunInfo

POLICY = load_policy("configs/policy/default.yaml")


def paced_run(n: int, b_slower_by: float) -> list[Exchange]:
    """One closed-loop user paced on a: each request starts when a's last answer ended, so a
    b that is slower by ``b_slower_by`` per request falls further behind every time."""
    out, start = [], 1_000.0
    for i in range(n):
        a = arm("a", ttft=0.05, itl=0.01)
        b = arm("b", ttft=0.05 + b_slower_by * (i + 1), itl=0.01)
        out.append(exchange(i, [a, b], started_at=start))
        start += a.t_end or 0.0
    return out


def with_waits(waits_for: str | None) -> RunInfo:
    run = run_info({})
    config: dict[str, object] = {"primary": "a"}
    if waits_for is not None:
        config["client_waits_for"] = waits_for
    run.config = config
    return run


def test_peak_in_flight_counts_overlapping_requests_of_one_arm() -> None:
    exchanges = paced_run(5, b_slower_by=1.0)
    assert peak_in_flight(exchanges, "a") == 1
    assert peak_in_flight(exchanges, "b") == 5
    assert peak_in_flight(paced_run(5, b_slower_by=0.0), "b") == 1


def test_primary_with_a_queue_is_stated_and_withholds_fails() -> None:
    text, withhold = pacing_statement(with_waits("primary"), paced_run(6, b_slower_by=1.0))
    assert withhold
    assert text is not None
    assert "peak in flight: a 1, b 6" in text


def test_primary_without_a_queue_is_stated_only() -> None:
    text, withhold = pacing_statement(with_waits("primary"), paced_run(6, b_slower_by=0.0))
    assert not withhold
    assert text is not None
    assert "No other arm had more requests in flight" in text


def test_all_arms_or_unrecorded_says_nothing() -> None:
    for waits in ("all_arms", None):
        assert pacing_statement(with_waits(waits), paced_run(6, b_slower_by=1.0)) == (None, False)


def test_a_queue_made_by_the_router_cannot_fail_the_run() -> None:
    exchanges = paced_run(80, b_slower_by=0.05)
    failed = judge(with_waits("all_arms"), exchanges, POLICY)
    paced = judge(with_waits("primary"), exchanges, POLICY)
    assert any(m.outcome == "fail" for m in failed.metrics)  # the same latencies fail unguarded
    assert all(m.outcome != "fail" for m in paced.metrics)
    assert paced.verdict != "fail"
    assert paced.pacing is not None
