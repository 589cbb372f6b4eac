"""No PASS while a tail looks guilty (issue 58).

A tail guard (``sequential.tails_required: false``) blocks nothing while it is open and its
estimate is within its allowance; once its estimate is beyond the allowance and it is still
undecided it is ``marginal`` and critical: a sequential run does not stop on it with PASS
(``gates.stop_now``), and a run whose budget ends there is marginal, naming the tail.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.stall_runs import judged, run

from abserve.compare import load_policy
from abserve.compare.gates import stop_now
from abserve.runs.rounds import decided, decision_needs, gate_outcomes

ROOT = Path(__file__).resolve().parents[3]
POLICY = load_policy(ROOT / "configs/policy/aa-default.yaml")


def tails(j: object) -> dict[str, tuple[str, bool]]:
    return {m.name: (m.outcome, m.critical) for m in j.metrics if m.kind == "tail"}  # type: ignore[attr-defined]


def test_an_open_tail_beyond_its_allowance_keeps_the_run_going_and_is_not_a_pass() -> None:
    j = judged(run(96, decode_stall=0.3, every=30), POLICY)  # 3 stalls in 96: too few to prove
    assert tails(j)["tpot.p99"] == ("marginal", True)
    assert not decided(j)
    assert not stop_now(gate_outcomes(j))  # type: ignore[arg-type]
    assert j.verdict == "marginal"
    assert any(r.startswith("tpot.p99: marginal") for r in j.reasons), j.reasons


def test_an_open_tail_within_its_allowance_blocks_nothing_once_it_has_watched_long_enough() -> None:
    j = judged(run(96), POLICY)
    assert tails(j)["tpot.p99"] == ("inconclusive", False)
    assert decided(j)
    assert j.verdict == "pass", j.reasons


def test_a_budget_end_names_the_guilty_tail_and_the_budget_that_would_decide_it() -> None:
    j = judged(run(60, decode_stall=0.3, every=30), POLICY)
    needs = decision_needs(j, 60, 3.0)
    assert re.search(r"tpot\.p99 about \d+ requests \(~\d+ min of load\)", needs), needs


def test_a_guard_that_has_not_watched_tail_watch_pairs_keeps_the_run_from_passing() -> None:
    """Under ``sequential.tail_watch`` judged pairs an open guard is critical though it looks
    innocent: a stall on 5% of requests may not have shown yet (benchmarks/tails.md)."""
    assert POLICY.sequential.tail_watch == 72
    j = judged(run(60), POLICY)
    assert tails(j)["tpot.p99"] == ("inconclusive", True)
    assert "a guard still watching" in next(m.reason for m in j.metrics if m.name == "tpot.p99")
    assert not decided(j)
    assert j.verdict == "inconclusive"
    failed = judged(run(60, decode_stall=0.3, every=4), POLICY)  # a fail needs no watching
    assert failed.verdict == "fail", failed.reasons


def test_a_guard_proven_in_one_half_only_keeps_the_run_going() -> None:
    """A 300 ms prefill stall on every 4th request of the second half only: the guards' net share
    is proven but not spread over the run (``unstable``); beyond their allowance, they stay
    critical, so the run goes on (more rounds may spread it) and its end is never a pass."""
    j = judged(run(96, prefill_stall=0.3, stalled_from=48, every=4), POLICY)
    assert tails(j)["e2e.p99"] == ("unstable", True)
    assert "not yet spread over the run: the run goes on" in next(m.reason for m in j.metrics
                                                                  if m.name == "e2e.p99")
    assert not decided(j)
    assert j.verdict != "pass"
