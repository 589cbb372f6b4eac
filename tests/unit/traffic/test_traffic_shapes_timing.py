"""Unit tests of load shapes (arrival plans) and the SSE stream timer."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abserve.traffic.shapes import levels_for, plan_arrivals, shard_arrivals
from abserve.traffic.timing import StreamTimer


def test_closed_loop_has_no_plan_and_open_loop_needs_one_bound() -> None:
    assert plan_arrivals("closed", 0, count=5) is None
    with pytest.raises(ValueError, match="exactly one"):
        plan_arrivals("constant", 2.0)
    with pytest.raises(ValueError, match="positive"):
        plan_arrivals("constant", 0.0, count=3)


def test_constant_rate_is_evenly_spaced_and_duration_bounded() -> None:
    plan = plan_arrivals("constant", 4.0, count=5)
    assert plan is not None
    assert [a.offset for a in plan] == [0.0, 0.25, 0.5, 0.75, 1.0]
    timed = plan_arrivals("constant", 4.0, duration=2.0)
    assert timed is not None
    assert len(timed) == 8
    assert timed[-1].offset < 2.0


def test_poisson_is_seeded_and_has_the_asked_mean_rate() -> None:
    a = plan_arrivals("poisson", 50.0, count=2000, seed=3)
    b = plan_arrivals("poisson", 50.0, count=2000, seed=3)
    c = plan_arrivals("poisson", 50.0, count=2000, seed=4)
    assert a == b
    assert a != c
    assert a is not None
    gaps = [y.offset - x.offset for x, y in itertools.pairwise(a)]
    assert 0.018 < sum(gaps) / len(gaps) < 0.022
    assert len(set(round(g, 6) for g in gaps)) > 100  # not a constant rate


def test_step_climbs_and_sweep_drains_between_levels() -> None:
    assert levels_for("step", 8.0, steps=4) == [2.0, 4.0, 6.0, 8.0]
    step = plan_arrivals("step", 8.0, count=8, steps=4)
    assert step is not None
    assert [a.rate for a in step] == [2, 2, 4, 4, 6, 6, 8, 8]
    sweep = plan_arrivals("sweep", 1.0, count=4, sweep_rates=[10.0, 20.0], drain_s=2.0)
    assert sweep is not None
    assert [a.offset for a in sweep] == pytest.approx([0.0, 0.1, 2.2, 2.25])


def test_shards_of_a_plan_partition_it() -> None:
    plan = plan_arrivals("poisson", 5.0, count=10, seed=1)
    assert plan is not None
    parts = [shard_arrivals(plan, s, 3) for s in range(3)]
    assert sorted((a for p in parts for a in p), key=lambda a: a.offset) == plan


def _events(*contents: str) -> list[bytes]:
    out = [b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n']
    out += [b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % c.encode() for c in contents]
    return out


def test_stream_timer_measures_ttft_itl_and_e2e_from_arrival_times() -> None:
    timer = StreamTimer(t_send=10.0)
    events = _events("a", "b", "c")
    blob = b"".join(events)
    # the first token event is split across two reads: its time is when it completed
    cut = len(events[0]) + 10
    timer.feed(blob[:cut], 10.1)
    timer.feed(blob[cut:len(events[0]) + len(events[1])], 10.25)
    timer.feed(events[2], 10.5)
    timer.feed(events[3] + b'data: {"choices":[],"usage":{"completion_tokens":3,'
               b'"prompt_tokens":9}}\n\ndata: [DONE]\n\n', 10.75)
    rec = timer.record(11.0, run_id="r", corpus_index=0, profile="p", sent_at=0.0)
    assert rec.ttft_s == pytest.approx(0.25)
    assert rec.itl_s == pytest.approx([0.25, 0.25])
    assert rec.e2e_s == pytest.approx(1.0)
    assert (rec.completion_tokens, rec.prompt_tokens, rec.error) == (3, 9, None)


def test_stream_timer_flags_truncation_and_error_events() -> None:
    timer = StreamTimer(0.0)
    timer.feed(b"".join(_events("a")), 0.1)
    assert timer.record(0.2, run_id="r", corpus_index=0, profile="p",
                        sent_at=0.0).error == "truncated"
    broken = StreamTimer(0.0)
    broken.feed(b'data: {"error":{"message":"x"}}\n\ndata: [DONE]\n\n', 0.1)
    assert broken.record(0.2, run_id="r", corpus_index=0, profile="p",
                         sent_at=0.0).error == "stream_error"


def test_a_token_arrives_when_its_event_ends_at_the_blank_line() -> None:
    timer = StreamTimer(0.0)
    first, token = _events("a")
    timer.feed(first + token[:-1], 0.1)  # the token's data line, not yet its blank line
    assert timer.token_times == []
    timer.feed(token[-1:] + b"data: [DONE]\r\n\r\n", 0.3)
    rec = timer.record(0.4, run_id="r", corpus_index=0, profile="p", sent_at=0.0)
    assert (rec.ttft_s, rec.n_token_events, rec.error) == (pytest.approx(0.3), 1, None)


def test_a_stream_that_stops_inside_its_done_event_is_truncated() -> None:
    timer = StreamTimer(0.0)
    timer.feed(b"".join(_events("a")) + b"data: [DONE]\n", 0.1)
    assert timer.record(0.2, run_id="r", corpus_index=0, profile="p",
                        sent_at=0.0).error == "truncated"


@given(st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_cutting_the_stream_anywhere_counts_the_same_tokens(cuts: list[int]) -> None:
    blob = b"".join(_events("a", "b", "c")) + b"data: [DONE]\n\n"
    timer, start = StreamTimer(0.0), 0
    for i, cut in enumerate([*sorted({min(c, len(blob)) for c in cuts}), len(blob)]):
        timer.feed(blob[start:cut], float(i))
        start = cut
    assert (len(timer.token_times), timer.done, timer.error) == (3, True, None)
    assert timer.token_times == sorted(timer.token_times)
