"""Every latency users feel has a critical tail, and a proven regression is never silent (issue 47).

A candidate that stalls one request in eight by 300 ms after its first token (the
``decode-stall`` mutant's shape) leaves the median request and TTFT untouched, and the mean shift
winsorizes the stalls as spikes: the CPU default's anytime ``tpot.p99`` and ``e2e.p99`` guards
fail it, while the same traffic without the stall does not fail. A reported (non-critical) line
whose interval proved a regression makes the verdict marginal at least, also when a guard held
it back as ``unstable``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.stall_runs import judged, run

from abserve.compare import Policy, load_policy
from abserve.compare.model import Judgment, Outcome
from abserve.compare.verdict import overall

ROOT = Path(__file__).resolve().parents[3]
FELT = {"ttft": ("ttft",), "between tokens": ("tpot", "itl"), "end to end": ("e2e",)}


def lines(j: Judgment) -> dict[str, str]:
    return {m.name: m.outcome for m in j.metrics}


@pytest.mark.parametrize("name", ["cpu-default", "gpu", "aa-default", "release-cpu", "gpu-release",
                                  "lookup-hybrid"])
def test_shipped_policies_gate_the_tail_of_every_latency_users_feel(name: str) -> None:
    policy = load_policy(ROOT / "configs" / "policy" / f"{name}.yaml")
    assert policy.mode == "sequential"
    assert policy.sequential.tails == "anytime"
    tails = {r.metric for r in policy.metrics if r.critical and r.statistic in ("p95", "p99")}
    missing = [what for what, metrics in FELT.items() if not tails & set(metrics)]
    assert not missing, f"{name}: no critical tail {missing}"


def test_a_stall_after_the_first_token_fails_the_cpu_default_on_its_tails() -> None:
    policy = load_policy(ROOT / "configs/policy/aa-default.yaml")
    j = judged(run(128, decode_stall=0.3), policy)
    outcomes = lines(j)
    assert j.verdict == "fail", j.reasons
    assert outcomes["tpot.p99"] == "fail"
    assert outcomes["e2e.p99"] == "fail"
    assert outcomes["ttft.p99"] != "fail"  # the first token is on time
    assert outcomes["tpot.hl"] != "fail"  # the mean shift clips the stalls as spikes
    assert any(r.startswith("tpot.p99: fail") for r in j.reasons)


def test_the_same_traffic_without_a_stall_does_not_fail_the_cpu_default() -> None:
    j = judged(run(128), load_policy(ROOT / "configs/policy/aa-default.yaml"))
    assert j.verdict == "pass", j.reasons
    assert lines(j)["tpot.p99"] == "inconclusive"  # a guard: open, blocking nothing


def test_a_reported_tail_proven_but_held_back_as_unstable_makes_the_verdict_marginal() -> None:
    """Stalls in the second half only: the e2e p99 is proven over the run but not in its first
    half (``unstable``: a block of slow requests, not a tail). Reported, and never silent."""
    policy = Policy.model_validate({
        "min_samples": 20, "mode": "sequential",
        "sequential": {"look_every": 8, "warmup": "fixed", "tails": "anytime"},
        "metrics": [{"metric": "tpot", "allowed_relative": 0.05, "critical": True},
                    {"metric": "e2e", "statistic": "p99", "allowed_relative": 0.10, "critical": False}],
    })
    j = judged(run(96, prefill_stall=0.3, stalled_from=48, every=4), policy)
    tail = next(m for m in j.metrics if m.name == "e2e.p99")
    assert tail.outcome == "unstable", tail.reason
    assert tail.regression
    assert lines(j)["tpot.hl"] == "pass"
    assert j.verdict == "marginal", j.reasons
    assert j.reasons[0].startswith("e2e.p99: unstable — a regression proven, held back as unstable: ")


def test_overall_counts_a_held_regression_as_marginal_at_least() -> None:
    rows: list[tuple[str, bool, Outcome, str]] = [("tpot.hl", True, "pass", "within"),
                                                  ("tpot.p99", False, "unstable", "drifted")]
    assert overall([], rows, sequential=True)[0] == "pass"
    verdict, code, reasons = overall([], rows, sequential=True, held=[("tpot.p99", "drifted")])
    assert (verdict, code) == ("marginal", 2)
    assert reasons == ["tpot.p99: unstable — a regression proven, held back as unstable: drifted"]
    worse: list[tuple[str, bool, Outcome, str]] = [*rows, ("ttft.hl", True, "inconclusive", "open")]
    assert overall([], worse, sequential=True, held=[("tpot.p99", "drifted")])[0] == "inconclusive"
    failed: list[tuple[str, bool, Outcome, str]] = [*rows, ("ttft.hl", True, "fail", "slower")]
    assert overall([], failed, sequential=True, held=[("tpot.p99", "drifted")])[0] == "fail"
