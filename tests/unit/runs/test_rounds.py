"""Sequential experiments before and between rounds: budgets, refusals, roles, the stop rule.

Everything a bad budget or policy can do wrong is refused before a server starts (``abserve
run`` exits 3 with one line, no traceback); the stop rule ends the run when the gates are
decided, and not before ``min_rounds`` or after the budget.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from abserve.compare.family import FamilyJudgment
from abserve.compare.model import EqualityVerdict, Judgment, MetricLine, TailShare
from abserve.compare.policy import Policy
from abserve.config import BudgetConfig, ExperimentConfig
from abserve.model.provenance import LookRecord
from abserve.runs.rounds import (
    RoundLog,
    check_budget,
    decision_needs,
    judging_roles,
    parse_budget,
    preflight,
    requests_to_decide,
    rotations,
    round_requests,
    should_stop,
)

REPO = Path(__file__).resolve().parents[3]


def config(tmp: Path | None = None, policy_text: str | None = None, **extra: Any) -> ExperimentConfig:
    raw: dict[str, Any] = {
        "name": "t",
        "arms": {"a": {"lookup": "linear", "role": "baseline"},
                 "b": {"lookup": "bisect", "role": "candidate"}},
        "load": {"profiles": [{"profile": "many-items", "requests": 16, "set": {"images.count": [8, 32]}},
                              {"profile": "multi-image-long-context", "requests": 8}]},
        "blocks": {"count": 8, "cpu_sets": [[0], [1]], "warmup_requests": 4},
        **extra,
    }
    if tmp is not None and policy_text is not None:
        (tmp / "policy.yaml").write_text(policy_text)
        raw["policy"] = str(tmp / "policy.yaml")
    else:
        raw["policy"] = str(REPO / "configs/policy/cpu-default.yaml")
    return ExperimentConfig.model_validate(raw)


def test_parse_budget_reads_time_requests_and_both() -> None:
    assert parse_budget("10m") == BudgetConfig(seconds=600)
    assert parse_budget("90s,400req") == BudgetConfig(seconds=90, requests=400)
    assert parse_budget("1.5h").seconds == 5400
    for bad in ("", "ten minutes", "10x", "-5m"):
        with pytest.raises(ValueError):
            parse_budget(bad)


def test_a_round_is_one_block_per_placement() -> None:
    cfg = config()
    assert rotations(cfg) == 2
    assert round_requests(cfg) == 2 * (2 + 1)
    shared = config(blocks={"count": 8, "order": "fixed", "warmup_requests": 4})
    assert rotations(shared) == 1
    assert round_requests(shared) == 3


def test_budget_below_one_round_is_refused_before_anything_starts() -> None:
    cfg = config()
    with pytest.raises(ValueError, match="below one round"):
        check_budget(cfg, BudgetConfig(requests=9))
    with pytest.raises(ValueError, match="cannot hold one round"):
        check_budget(cfg, BudgetConfig(seconds=30))
    check_budget(cfg, BudgetConfig(requests=10, seconds=300))


def test_preflight_refuses_an_unknown_policy_key_and_an_empty_improvement_stratum(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"max_eror_rate|extra"):
        preflight(config(tmp_path, "max_eror_rate: 0.1\n"), None)
    empty = "mode: sequential\nmin_samples: 20\nimprovements: [{metric: tpot, min_items: 128}]\n"
    with pytest.raises(ValueError, match=r"tpot.improvement@128\+ cannot be reached: the traffic has "
                                         r"at most 32 images per request"):
        preflight(config(tmp_path, empty), None)  # images.count [8, 32]; the other profile fewer
    policy, rounds = preflight(config(tmp_path, "mode: sequential\n"), BudgetConfig(seconds=200))
    assert policy.mode == "sequential"
    assert rounds is not None
    assert rounds.budget.seconds == 200


def test_preflight_refuses_a_budget_under_a_fixed_sample_policy(tmp_path: Path) -> None:
    """A budget stops at the first look where the gates look decided: on one-look intervals
    that peeking would inflate false fails, so the run is refused before a server starts."""
    with pytest.raises(ValueError, match="mode: fixed"):
        preflight(config(tmp_path, "mode: fixed\n"), BudgetConfig(seconds=200))
    policy, rounds = preflight(config(tmp_path, "mode: fixed\nmin_samples: 20\n"), None)
    assert policy.mode == "fixed"
    assert rounds is None


def test_judging_roles_follow_the_config_when_the_policy_names_other_arms() -> None:
    floor = ExperimentConfig.model_validate({
        "name": "f", "arms": {"a": {"lookup": "linear"}, "a2": {"lookup": "linear", "role": "noise_floor"}},
        "load": {"profiles": [{"profile": "many-items", "requests": 4}]}})
    roles = judging_roles(floor, Policy()).arms
    assert (roles.baseline, roles.candidate, roles.floor) == ("a", "a2", None)
    assert judging_roles(config(), Policy()).arms == Policy().arms


def _judgment(*outcomes: tuple[str, bool, str]) -> Judgment:
    _, eq_critical, eq_outcome = outcomes[0]
    eq = EqualityVerdict(floor_measured=False, threshold=0.0, critical=eq_critical, outcome=eq_outcome,
                         reason="")
    lines = [MetricLine(name=n, metric="tpot", statistic="mean", direction="increase", critical=c, n=50,
                        confidence=0.95, outcome=o, reason="") for n, c, o in outcomes[1:]]
    return Judgment(run_id="r", run_status="running", started_at=0.0, verdict="inconclusive", exit_code=2,
                    equality_verdict=eq, metrics=lines)


def test_stop_rule_waits_for_decisions_min_rounds_and_respects_the_budget() -> None:
    now = time.monotonic()
    log = RoundLog(budget=BudgetConfig(seconds=600, min_rounds=2), rounds=1, requests=20)
    passed = _judgment(("equality", True, "pass"), ("tpot.hl", True, "pass"),
                       ("itl.hl", False, "inconclusive"))
    assert not should_stop(log, passed, now, 10.0, 10)  # decided, but only one round
    log.rounds = 2
    assert should_stop(log, passed, now, 10.0, 10)
    assert log.decided
    assert "every critical gate passed" in log.stop_reason
    failed = RoundLog(budget=BudgetConfig(seconds=600, min_rounds=1), rounds=1)
    assert should_stop(failed, _judgment(("equality", True, "fail"), ("tpot.hl", True, "inconclusive")),
                       now, 10.0, 10)
    assert "equality failed" in failed.stop_reason
    open_gates = _judgment(("equality", True, "pass"), ("tpot.hl", True, "inconclusive"))
    out_of_time = RoundLog(budget=BudgetConfig(seconds=100), rounds=3)
    assert should_stop(out_of_time, open_gates, now - 95, 10.0, 10)
    assert not out_of_time.decided
    assert "undecided: tpot.hl" in out_of_time.stop_reason
    out_of_requests = RoundLog(budget=BudgetConfig(requests=100), rounds=3, requests=95)
    assert should_stop(out_of_requests, open_gates, now, 1.0, 10)
    assert "request budget" in out_of_requests.stop_reason
    assert len(out_of_requests.looks) == 1
    assert (out_of_requests.looks[0].gates == {
        "equality": "pass", "tpot.hl": "inconclusive"})


def test_a_guilty_looking_tail_guard_holds_the_run_past_its_budget_up_to_tail_requests() -> None:
    now = time.monotonic()
    guilty = _judgment(("equality", True, "pass"), ("tpot.hl", True, "pass"), ("e2e.p99", True, "marginal"))
    guilty.metrics[-1].guard = True
    budget = BudgetConfig(seconds=100, tail_requests=300)
    log = RoundLog(budget=budget, rounds=10, requests=120)
    assert not should_stop(log, guilty, now - 95, 10.0, 12)  # out of time, but the guard looks guilty
    assert log.tail_held == 120
    log.requests = 290
    assert should_stop(log, guilty, now - 400, 10.0, 12)  # the next round would pass tail_requests
    assert "time budget of 100 s reached" in log.stop_reason
    assert "held the run past its budget from 120 requests on (budget.tail_requests: 300)" in log.stop_reason
    held = _judgment(("equality", True, "pass"), ("tpot.hl", True, "pass"), ("e2e.p99", True, "unstable"))
    held.metrics[-1].guard = True
    held.metrics[-1].tail_share = TailShare(allowed_share=0.01, per_request=0.1, n=120, slowed=5, mirrored=0,
                                            estimate=0.042, low=0.0, high=0.1)
    assert not should_stop(RoundLog(budget=budget, rounds=10, requests=120), held, now - 95, 10.0, 12)
    not_a_guard = _judgment(("equality", True, "pass"), ("tpot.hl", True, "marginal"))
    assert should_stop(RoundLog(budget=budget, rounds=10, requests=120), not_a_guard, now - 95, 10.0, 12)
    without = RoundLog(budget=BudgetConfig(seconds=100), rounds=10, requests=120)
    assert should_stop(without, guilty, now - 95, 10.0, 12)  # no tail_requests: the budget ends it
    assert "held" not in without.stop_reason
    failed = _judgment(("equality", True, "pass"), ("tpot.hl", True, "pass"), ("e2e.p99", True, "fail"))
    long_run = RoundLog(budget=budget, rounds=10, requests=200, tail_held=130)
    assert should_stop(long_run, failed, now - 300, 10.0, 12)
    assert long_run.stop_reason.startswith("decided after 10 rounds: e2e.p99 failed; tail guards that looked")


def _family(**judgments: Judgment) -> FamilyJudgment:
    return FamilyJudgment(baseline="a", floor=None, candidates={}, judgments=judgments, steps=[],
                          family_alpha=0.05, correction="Holm", verdict="inconclusive", exit_code=2,
                          reasons=[])


def test_several_candidates_stop_when_each_is_decided_not_at_the_first_failure() -> None:
    now = time.monotonic()
    failed = _judgment(("equality", True, "fail"), ("tpot.hl", True, "inconclusive"))
    still_open = _judgment(("equality", True, "pass"), ("tpot.hl", True, "inconclusive"))
    passed = _judgment(("equality", True, "pass"), ("tpot.hl", True, "pass"))
    log = RoundLog(budget=BudgetConfig(seconds=600, min_rounds=1), rounds=2, requests=20)
    assert not should_stop(log, _family(drop=failed, b=still_open), now, 10.0, 10)  # b not known yet
    assert should_stop(log, _family(drop=failed, b=passed), now, 10.0, 10)
    assert log.decided
    assert log.stop_reason == "decided after 2 rounds: drop: equality failed; b: every critical gate passed"


@pytest.mark.process
def test_run_cli_refuses_a_tiny_budget_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "abserve", "run", "configs/cpu-default.yaml", "--out",
                           str(tmp_path / "out"), "--budget", "5req"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "below one round" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "out" / "logs").exists()  # nothing started


def _line(outcome: str, low: float, high: float, threshold: float) -> MetricLine:
    return MetricLine(name="tpot.hl", metric="tpot", statistic="mean", direction="increase", critical=True,
                      n=40, confidence=0.95, outcome=outcome, reason="", low=low, high=high,
                      threshold=threshold)


def test_an_undecided_gate_says_what_budget_a_decision_would_need() -> None:
    # half-width 1.0 around 0.0, margin 0.5 away: the width must halve, so 4x the requests
    assert requests_to_decide(_line("inconclusive", -1.0, 1.0, 0.5), 40) == 160
    assert requests_to_decide(_line("inconclusive", -1.0, 1.0, 0.01), 40) is None  # on the margin
    assert requests_to_decide(_line("unstable", -1.0, 1.0, 0.5), 40) is None
    assert requests_to_decide(_line("pass", -1.0, 0.4, 0.5), 40) is None
    judgment = _judgment(("equality", True, "pass"))
    judgment.metrics = [_line("inconclusive", -1.0, 1.0, 0.5)]
    log = RoundLog(budget=BudgetConfig(requests=40), rounds=4, requests=40)
    log.looks = [LookRecord(requests=10, seconds=100.0)]
    now = time.monotonic()
    assert should_stop(log, judgment, now, 1.0, 10)
    # pace between the looks: (seconds at this look - 100) / 30 requests; the stop reason says it
    assert "a decision would need at least: tpot.hl about 160 requests" in log.stop_reason
    assert decision_needs(judgment, 40, 3.0).endswith("tpot.hl about 160 requests (~8 min of load)")
