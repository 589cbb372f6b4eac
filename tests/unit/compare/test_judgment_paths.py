"""``judge`` takes one of two explicit paths by ``policy.mode``; the old switch still loads.

A fixed-mode policy's judgment carries exactly the lines ``judge_fixed.FixedSample`` builds
(one look, pooled or counterbalanced intervals), a sequential one those of
``judge_sequential.Sequential`` (anytime-valid, a trajectory per look); the built-in default
is ``default.yaml``'s, every shipped policy states its mode, and ``sequential.enabled`` maps
onto ``mode``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from tests.support.records_factory import ab_run, run_info

from abserve.compare import Policy, judge, load_policy
from abserve.compare.digest import Digester
from abserve.compare.gate_line import gate_line
from abserve.compare.judge import JudgmentPath, path_of, select_judged
from abserve.compare.judge_fixed import FixedSample
from abserve.compare.judge_sequential import Sequential
from abserve.compare.model import Judgment, MetricLine
from abserve.compare.policy import ImprovementRule, MetricRule, SequentialRule

POLICIES = Path(__file__).resolve().parents[3] / "configs" / "policy"
RULES = [{"metric": "tpot", "critical": True}, {"metric": "ttft", "critical": True},
         {"metric": "tpot", "statistic": "p95"}]


def policy(**kw: object) -> Policy:
    return Policy.model_validate({"metrics": RULES, "min_samples": 20, "warmup_requests": 4,
                                  "sequential": {"look_every": 8}, **kw})


def built_by(path: JudgmentPath, p: Policy, n: int = 80) -> tuple[Judgment, list[MetricLine], int]:
    """The judgment of an A/A' run under ``p``, and the lines and looks ``path`` builds for it."""
    exchanges = ab_run(n, seed=5)
    digest = Digester(p)
    digest.feed(exchanges)
    judged, _ = path.judged(digest.ordered(), digest.latencies, p)
    lines, _, looks = path.gates(judged, digest.latencies, p)
    return judge(run_info(), exchanges, p), lines, looks


def test_a_fixed_mode_policy_gets_the_lines_the_fixed_sample_path_builds() -> None:
    p = policy(mode="fixed")
    assert isinstance(path_of(p), FixedSample)
    j, lines, looks = built_by(FixedSample(), p)
    assert [m.model_dump() for m in j.metrics] == [m.model_dump() for m in lines]
    assert not j.sequential
    assert j.looks == looks == 1
    assert [m.statistic for m in j.metrics] == ["hl", "hl", "p95"]
    assert all(m.method == "pooled" and not m.trajectory for m in j.metrics)


def test_a_sequential_mode_policy_gets_the_lines_the_sequential_path_builds() -> None:
    p = policy(mode="sequential")
    assert isinstance(path_of(p), Sequential)
    j, lines, looks = built_by(Sequential(), p)
    assert [m.model_dump() for m in j.metrics] == [m.model_dump() for m in lines]
    assert j.sequential
    assert j.looks == looks > 1
    shifts = j.metrics[:2]
    assert [m.statistic for m in shifts] == ["mean", "mean"]
    assert all(m.method.startswith("anytime-") and len(m.trajectory) == looks for m in shifts)
    assert j.metrics[2].reason.endswith("(fixed-sample interval, not anytime-valid)")  # tails: fixed


def test_the_two_paths_judge_the_same_run_differently() -> None:
    fixed, _, _ = built_by(FixedSample(), policy(mode="fixed"))
    sequential, _, _ = built_by(Sequential(), policy(mode="sequential"))
    assert fixed.equality_verdict is not None
    assert sequential.equality_verdict is not None
    assert "anytime-valid" in sequential.equality_verdict.reason
    assert "anytime-valid" not in fixed.equality_verdict.reason
    assert fixed.metrics[0].method != sequential.metrics[0].method


def test_only_the_sequential_path_detects_warmup_and_only_when_asked() -> None:
    exchanges = ab_run(40)
    digest = Digester(policy())
    digest.feed(exchanges)
    ordered, lat = digest.ordered(), digest.latencies
    for p in (policy(mode="fixed"), policy(mode="sequential", sequential={"warmup": "fixed"})):
        judged, why = select_judged(ordered, lat, p)
        assert judged == ordered[4:]
        assert why == "first 4 exchanges cut (fixed warm-up)"
    _, why = select_judged(ordered, lat, policy(mode="sequential", sequential={"warmup": "auto"}))
    assert why.endswith("; no longer transient detected") or "(MSER-5)" in why


def test_the_default_mode_is_the_default_policys_and_every_shipped_policy_states_its_own() -> None:
    assert Policy().mode == load_policy(POLICIES / "default.yaml").mode == "fixed"
    files = sorted(POLICIES.glob("*.yaml"))
    unstated = [f.name for f in files if not {"extends", "mode"} & yaml.safe_load(f.read_text()).keys()]
    assert unstated == []  # each file says its mode, or inherits it from the one it extends
    modes = {path.stem: load_policy(path).mode for path in files}
    assert {name for name, mode in modes.items() if mode == "fixed"} == {"default", "aa-placement"}
    assert modes["cpu-default"] == modes["gpu"] == modes["selftest"] == modes["by-hand"] == "sequential"


@pytest.mark.parametrize(("enabled", "mode"), [(True, "sequential"), (False, "fixed")])
def test_the_old_switch_still_loads_as_mode(enabled: bool, mode: str) -> None:
    p = Policy.model_validate({"sequential": {"enabled": enabled, "look_every": 8}})
    assert p.mode == mode
    assert p.sequential.look_every == 8
    assert "enabled" not in p.model_dump()["sequential"]
    assert Policy.model_validate(p.model_dump()) == p


def test_the_old_switch_decides_in_a_file_extending_a_shipped_policy(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(f"extends: {POLICIES / 'default.yaml'}\nsequential: {{enabled: true}}\n")
    assert load_policy(POLICIES / "default.yaml").mode == "fixed"
    assert load_policy(old).mode == "sequential"
    old.write_text(f"extends: {POLICIES / 'cpu-default.yaml'}\nsequential: {{enabled: false}}\n")
    assert load_policy(old).mode == "fixed"


def test_a_stored_report_policy_with_the_old_switch_loads() -> None:
    stored = policy(mode="fixed").model_dump(mode="json")
    stored.pop("mode")
    stored["sequential"]["enabled"] = False  # what report.json held before ``mode``
    assert Policy.model_validate(stored) == policy(mode="fixed")


def test_the_old_switch_and_mode_refuse_what_they_cannot_mean() -> None:
    with pytest.raises(ValidationError, match=r"sequential\.enabled must be true or false"):
        Policy.model_validate({"sequential": {"enabled": "sometimes"}})
    with pytest.raises(ValidationError, match="mode"):
        Policy.model_validate({"mode": "bayesian"})
    with pytest.raises(ValidationError, match="enabled"):
        SequentialRule.model_validate({"enabled": True})  # a key of the policy's mapping only


def test_gate_line_names_an_unjudged_gate_after_its_rule() -> None:
    p = policy(confidence=0.9)
    tail = gate_line(MetricRule(metric="ttft", statistic="p95", direction="either", critical=True), 7, p)
    named = (tail.name, tail.statistic, tail.direction, tail.critical, tail.n)
    assert named == ("ttft.p95", "p95", "either", True, 7)
    assert (tail.outcome, tail.reason, tail.confidence, tail.estimate) == ("inconclusive", "", 0.9, None)
    shift = gate_line(MetricRule(metric="tpot"), 3, p, statistic="mean", reason="too few")
    assert (shift.statistic, shift.reason) == ("mean", "too few")
    claim = gate_line(ImprovementRule(metric="tpot", min_items=128), 0, p)
    assert (claim.name, claim.statistic, claim.direction) == ("tpot.improvement@128+", "mean", "increase")
