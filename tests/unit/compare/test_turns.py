"""Latency by turn and by shared prefix: each arm's median and the paired shift per group."""

from __future__ import annotations

import pytest
from tests.support.conversation_runs import (
    CACHED_TTFT,
    FIRST_TTFT,
    cached_run,
    conversation_policy,
    conversations,
)
from tests.support.records_factory import ab_run, run_info

from abserve.compare import judge
from abserve.compare.turns import shared_group, turn_group


def test_groups_of_tags() -> None:
    assert turn_group({"turn": "1"}) == "first turn"
    assert turn_group({"turn": "7"}) == "later turns"
    assert [turn_group({"turn": t}) for t in ("0", "x", "")] == [None, None, None]
    assert turn_group({}) is None
    assert shared_group({"shared-prefix": "yes"}) == "shared prefix"
    assert shared_group({"shared-prefix": "no"}) == "no shared prefix"
    assert shared_group({"shared-prefix": "maybe"}) is None


def test_lost_reuse_shows_on_later_turns_only() -> None:
    j = judge(cached_run(None, None), conversations(12, later_ttft=FIRST_TTFT), conversation_policy())
    rows = {(r.dimension, r.group, r.metric): r for r in j.turns}
    assert list(rows)[:4] == [("turn", "first turn", "ttft"), ("turn", "first turn", "e2e"),
                              ("turn", "later turns", "ttft"), ("turn", "later turns", "e2e")]
    assert ("shared-prefix", "no shared prefix", "ttft") in rows
    assert ("shared-prefix", "shared prefix", "e2e") in rows
    first, later = rows["turn", "first turn", "ttft"], rows["turn", "later turns", "ttft"]
    assert (first.n, later.n) == (12, 24)
    assert first.baseline == pytest.approx(FIRST_TTFT, abs=0.003)
    assert later.baseline == pytest.approx(CACHED_TTFT, abs=0.003)
    assert later.candidate == pytest.approx(FIRST_TTFT, abs=0.003)
    assert first.low is not None
    assert first.high is not None
    assert first.low < 0 < first.high  # first turns: no shift
    assert later.estimate == pytest.approx(FIRST_TTFT - CACHED_TTFT, abs=0.003)
    assert later.low is not None
    assert later.low > 0.15
    assert rows["shared-prefix", "shared prefix", "ttft"].n == 24


def test_the_mutant_fails_on_ttft_of_later_turns() -> None:
    j = judge(cached_run((10_000, 7_000), (10_000, 0)), conversations(12, later_ttft=FIRST_TTFT),
              conversation_policy())
    later = next(m for m in j.metrics if m.name == "ttft.stratum[later-turns]")
    assert later.outcome == "fail", later.reason
    assert later.reason.startswith("later turns (67% of traffic): TTFT +")
    assert j.verdict == "fail"


def test_a_run_without_turn_tags_has_no_rows() -> None:
    j = judge(run_info(), ab_run(40), conversation_policy(strata=[]))
    assert j.turns == []
    assert j.prefix_cache is None
