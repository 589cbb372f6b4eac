"""The policy against the planned traffic (``compare/reachability.py``), pure: which gates the
requests reach, the smallest samples the gates can decide on, the expected cost; and a gate the
policy does not require that no request reached is "not judged" and holds no run open."""

from __future__ import annotations

import math

import pytest
from tests.support.strata_runs import judged, policy, run

from abserve.compare.gates import stop_now
from abserve.compare.plan import anytime_pairs_needed
from abserve.compare.reachability import (
    Sending,
    TrafficPart,
    equality_pairs,
    reachability,
    request_seconds,
    tail_pairs,
)
from abserve.compare.stats.anytime import mixture_radius, rate_sequence

FILE = TrafficPart("file-chat", 40, {1: 10.0, 3: 20.0, 6: 10.0}, True, {"tenant": frozenset({"t0"})}, 2.0)
DENSE = TrafficPart("many-items", 40, dict.fromkeys(range(128, 513), 1.0), False, seconds=4.0)


def sending(cap: int | None = None, seconds: float | None = None, binding: bool = True) -> Sending:
    what = f"the plan of {cap} requests" if cap else f"the budget of {seconds:.0f} s"
    return Sending(cap, seconds, 90.0, what, binding)


def test_the_smallest_decidable_samples_are_the_documented_ones() -> None:
    """quantile_cs.py: paired p95 from 64 pairs, p99 from 305 (alpha 0.05); equality's 10%
    resolution after about 52 comparable requests (configs/policy/cpu-default.yaml)."""
    assert tail_pairs(0.95, 0.05, paired=True) == 64
    assert tail_pairs(0.99, 0.05, paired=True) == 305
    assert (tail_pairs(0.95, 0.05, paired=False) or 0) > 64  # alpha/2 per arm
    n = equality_pairs(policy())
    assert n is not None
    assert 45 <= n <= 60
    assert rate_sequence(0, n, 0.05).high <= 0.10 < rate_sequence(0, n - 1, 0.05).high


def test_anytime_pairs_needed_is_where_the_interval_first_fits_the_allowance() -> None:
    n = anytime_pairs_needed(0.026, 0.025, 0.95)
    assert n is not None

    def radius(k: int) -> float:
        return mixture_radius(0.026 / math.sqrt(k), float(k), k - 2, 0.05, 1.0)
    assert radius(n) <= 0.025 < radius(n - 1)
    assert anytime_pairs_needed(0.0, 0.025, 0.95) is None
    assert anytime_pairs_needed(1.0, 1e-6, 0.95, limit=1000) is None


def test_a_claim_on_images_the_traffic_never_carries_is_refused_in_one_line() -> None:
    p = policy(improvements=[{"metric": "tpot", "min_items": 128}], strata=[])
    reach = reachability(p, [FILE], sending(seconds=500), 0)
    [line] = reach.refusals()
    assert "\n" not in line
    assert line.startswith("policy gate tpot.improvement@128+ cannot be reached: the traffic has at most "
                           "6 images per request (file-chat: 1-6); it needs requests with >= 128 images")
    assert "required: false" in line
    assert reachability(p, [FILE, DENSE], sending(seconds=500), 0).refusals() == []


def test_a_gate_not_required_is_listed_as_not_judged_instead() -> None:
    p = policy(improvements=[{"metric": "tpot", "min_items": 128, "required": False}])  # dense: not required
    reach = reachability(p, [FILE], sending(seconds=500), 0)
    assert reach.refusals() == []
    unjudged = reach.not_judged()
    assert [line.split(":")[0] for line in unjudged] == [
        "tpot.improvement@128+", "tpot.stratum[dense]", "ttft.stratum[dense]"]
    said = "not judged: the traffic never reaches it (it has at most 6 images"
    assert all(said in line for line in unjudged)
    assert set(unjudged) <= set(reach.lines())


def test_strata_by_range_profile_and_tag() -> None:
    few = policy(strata=[{"name": "few", "tag": "items", "max": 4, "required": True}])
    assert reachability(few, [DENSE], sending(seconds=500), 0).refusals()[0].startswith(
        "policy gate tpot.stratum[few] cannot be reached: the traffic has at least 128 images per request")
    assert reachability(few, [FILE], sending(seconds=500), 0).refusals() == []
    named = policy(strata=[{"name": "p", "tag": "profile", "values": ["interleaved"], "required": True}])
    assert "the profiles file-chat, many-items" in reachability(named, [FILE, DENSE], sending(seconds=500),
                                                               0).refusals()[0]
    tenant = policy(strata=[{"name": "t", "tag": "tenant", "values": ["t9"], "required": True}])
    assert reachability(tenant, [FILE], sending(seconds=500), 0).refusals()  # files carry t0 only
    assert reachability(tenant, [FILE, DENSE], sending(seconds=500), 0).refusals() == []  # cannot tell


def test_cost_per_image_needs_two_image_counts() -> None:
    p = policy(per_item=[{"metric": "tpot", "critical": True}], strata=[])
    one = TrafficPart("file-one", 40, {3: 40.0}, True)
    assert "requests of at least two different image counts" in reachability(
        p, [one], sending(seconds=500), 0).refusals()[0]
    assert reachability(p, [FILE], sending(seconds=500), 0).refusals() == []


def test_a_capped_plan_must_hold_min_samples_and_required_tails() -> None:
    p = policy(strata=[])  # min_samples 20; ttft.p95 critical, a guard (tails_required false)
    tpot, ttft = reachability(p, [FILE], sending(cap=25), 10).refusals()
    assert ttft.startswith("policy gate ttft.hl cannot be decided")
    assert tpot.startswith("policy gate tpot.hl cannot be decided: the plan of 25 requests gives at most 15 "
                           "pairs of every request, it needs 20; send about 30 requests")
    assert any(g.startswith("ttft.p95: will not be decided") for g in
               reachability(p, [FILE], sending(cap=40), 0).not_judged())
    required = policy(strata=[], sequential={"tails": "anytime", "tails_required": True, "look_every": 8})
    assert "ttft.p95 cannot be decided" in reachability(required, [FILE], sending(cap=40), 0).refusals()[0]
    assert reachability(required, [FILE], sending(cap=64), 0).refusals() == []
    assert reachability(p, [FILE], sending(cap=25, binding=False), 10).refusals() == []  # compose: warned
    assert "(at 2x this machine's measured pace)" in reachability(p, [FILE], sending(seconds=100),
                                                                 0).refusals()[0]  # 10 requests


def test_the_expected_cost_and_the_budget_warning() -> None:
    p = policy(strata=[], improvements=[{"metric": "tpot", "min_items": 128}])
    reach = reachability(p, [FILE, DENSE], sending(seconds=500), 0)
    need = reach.expected_requests()
    assert need is not None
    assert reach.pace == pytest.approx(3.0)  # half the requests 2 s, half 4 s
    first = reach.lines()[0]
    assert first.startswith(f"expected cost: about {need} requests and {90 + need * 3:.0f} s")
    assert "assuming the change has no effect" in reach.lines()[1]
    short = reachability(p, [FILE, DENSE], sending(seconds=100), 0).lines()
    assert any(line.startswith("warning: the time budget of 100 s is unlikely to fit it") for line in short)
    capped = reachability(p, [FILE, DENSE], sending(cap=need - 1), 0).lines()
    assert any("is unlikely to be enough" for line in capped)
    # the improvement lives on half the traffic: it needs about twice the requests of its pairs
    gate = next(g for g in reach.gates if g.name == "tpot.improvement@128+")
    assert gate.share == pytest.approx(0.5)
    assert gate.requests(0) == math.ceil((gate.pairs or 0) / 0.5)
    assert request_seconds(1000, 10) > request_seconds(100, 10)


def test_a_gate_no_request_reached_is_not_judged_and_holds_nothing_open() -> None:
    """An improvement the policy does not require, on traffic without such requests: its line
    says so, it is not critical, the stop rule and the verdict go on without it."""
    few = (2, 4, 8, 16)
    p = policy(strata=[], improvements=[{"metric": "tpot", "min_items": 128, "required": False}],
               metrics=[{"metric": "tpot", "allowed_relative": 0.05, "critical": True}])
    j = judged(run(96, items=few), p)
    line = next(m for m in j.metrics if m.name == "tpot.improvement@128+")
    assert line.reason.startswith("not judged: the traffic never reaches it (0 paired requests")
    assert line.guard
    assert not line.critical
    assert stop_now([(m.name, m.critical, m.outcome) for m in j.metrics])
    assert j.verdict == "pass", j.reasons
    required = policy(strata=[], improvements=[{"metric": "tpot", "min_items": 128}])
    held = next(m for m in judged(run(96, items=few), required).metrics if m.name == "tpot.improvement@128+")
    assert held.critical
    assert not held.reason.startswith("not judged")


def test_a_time_budget_refuses_a_required_tail_only_beyond_twice_the_measured_pace() -> None:
    """p99 needs 305 pairs: 300 s hold (300 - 90) * 2 / 2 s = 210 requests even at twice the pace
    (refused); 500 s hold 410 at twice the pace (runs, with a warning at the measured pace)."""
    p = policy(strata=[], sequential={"tails": "anytime", "tails_required": True, "look_every": 8},
               metrics=[{"metric": "tpot", "statistic": "p99", "allowed_relative": 0.1, "critical": True}])
    paced = TrafficPart("file-chat", 40, {1: 1.0}, True, seconds=2.0)
    [line] = reachability(p, [paced], sending(seconds=300), 0).refusals()
    assert line.startswith("policy gate tpot.p99 cannot be decided: the budget of 300 s gives at most 210 "
                           "pairs of every request (at 2x this machine's measured pace), it needs 305")
    roomy = reachability(p, [paced], sending(seconds=500), 0)
    assert roomy.refusals() == []
    said = roomy.lines()
    assert any(line.startswith("warning: the time budget of 500 s is unlikely to fit it") for line in said)
    unpaced = TrafficPart("file-chat", 40, {1: 1.0}, True)  # no measured pace (a GPU host): no refusal
    assert reachability(p, [unpaced], sending(seconds=300), 0).refusals() == []
