"""The counterbalanced block plan: balanced orders, Latin-square rotations, config checks,
request shares and the block record kept in provenance."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from abserve.config import ExperimentConfig, load_experiment
from abserve.model.placement import (
    block_order,
    is_balanced,
    parse_placement,
    placement_label,
    plan_blocks,
    rotation,
    split_requests,
)
from abserve.runs.blocks import block_record, experiment_blocks


def test_two_arms_swap_in_abba_order() -> None:
    plan = plan_blocks(["a", "b"], [[0], [1]], 4, "balanced")
    assert [b.label for b in plan] == ["a:0,b:1", "a:1,b:0", "a:1,b:0", "a:0,b:1"]
    assert [b.rotation for b in plan] == [0, 1, 1, 0]
    assert is_balanced(plan)


def test_three_arms_visit_every_slot_once_per_cycle_and_mirror() -> None:
    assert block_order(6, 3, "balanced") == [0, 1, 2, 2, 1, 0]
    assert block_order(6, 3, "cyclic") == [0, 1, 2, 0, 1, 2]
    assert block_order(3, 3, "fixed") == [0, 0, 0]
    sets = [[0], [1], [2]]
    square = [rotation(["a", "b", "a2"], sets, r) for r in range(3)]
    for arm in ("a", "b", "a2"):  # a Latin square: each arm on each set exactly once
        assert sorted(p[arm] for p in square) == [(0,), (1,), (2,)]
    for p in square:  # and no two arms share a set within a block
        assert len(set(p.values())) == 3


def test_more_arms_than_sets_share_sets_and_rotate_through_them() -> None:
    plan = plan_blocks(["a", "b", "a2"], [[0], [1]], 4, "balanced")
    assert [b.label for b in plan] == ["a:0,b:1,a2:0", "a:1,b:0,a2:1", "a:1,b:0,a2:1", "a:0,b:1,a2:0"]


def test_without_sets_every_block_keeps_the_static_placement() -> None:
    plan = plan_blocks(["a", "b"], None, 3, "balanced", {"a": [0], "b": None})
    assert [b.label for b in plan] == ["a:0,b:none"] * 3
    assert all(b.rotation == 0 for b in plan)


def test_unbalanced_plan_is_detected() -> None:
    assert not is_balanced(plan_blocks(["a", "b"], [[0], [1]], 3, "balanced"))


def test_placement_label_round_trips_and_bad_labels_are_refused() -> None:
    label = placement_label({"a": (0, 1), "b": (2, 3)})
    assert label == "a:0+1,b:2+3"
    assert parse_placement(label) == {"a": "0+1", "b": "2+3"}
    with pytest.raises(ValueError, match="expected"):
        parse_placement("a0,b:1")


def test_requests_are_split_evenly_over_blocks() -> None:
    assert split_requests(10, 4) == [3, 3, 2, 2]
    assert sum(split_requests(48, 4)) == 48


def test_block_record_has_times_and_placement() -> None:
    block = plan_blocks(["a", "b"], [[0], [1]], 2, "balanced")[1]
    rec = block_record(block, 10.0, 12.5, 8)
    assert rec.model_dump() == {"index": 1, "rotation": 1, "placement_label": "a:1,b:0",
                                "placement": {"a": [1], "b": [0]}, "started_at": 10.0, "ended_at": 12.5,
                                "requests": 8, "pinned": {}}


def _config(**blocks: Any) -> dict[str, Any]:
    return {"name": "t", "arms": {"a": {"lookup": "linear"}, "b": {"lookup": "bisect"}},
            "load": {"profiles": [{"profile": "many-items", "requests": 8}]}, "blocks": blocks}


def test_config_blocks_validate_with_clear_errors() -> None:
    cfg = ExperimentConfig.model_validate(_config(count=4, cpu_sets=[[0], [1]]))
    assert [b.label for b in experiment_blocks(cfg)][:2] == ["a:0,b:1", "a:1,b:0"]
    with pytest.raises(ValidationError, match="equally often"):
        ExperimentConfig.model_validate(_config(count=3, cpu_sets=[[0], [1]]))
    with pytest.raises(ValidationError, match="same size"):
        ExperimentConfig.model_validate(_config(count=2, cpu_sets=[[0], [1, 2]]))
    with pytest.raises(ValidationError, match="fewer requests than blocks"):
        ExperimentConfig.model_validate(_config(count=16, cpu_sets=[[0], [1]]))
    pinned = _config(count=2, cpu_sets=[[0], [1]])
    pinned["arms"]["a"]["cpus"] = [0]
    with pytest.raises(ValidationError, match="choose one"):
        ExperimentConfig.model_validate(pinned)


def test_shipped_configs_share_a_core_or_run_counterbalanced_blocks() -> None:
    """The CPU default puts both arms on one core (no placement to counterbalance); the
    placement studies rotate the arms over cores."""
    root = Path(__file__).resolve().parents[3] / "configs"
    cfg = load_experiment(root / "cpu-default.yaml")
    plan = experiment_blocks(cfg)
    assert len(plan) >= 4
    assert is_balanced(plan)
    assert {b.placement["a"] for b in plan} == {b.placement["b"] for b in plan} == {(0,)}
    for path in (root / "aa-placement.yaml", root / "many-items-placement.yaml"):
        raw = yaml.safe_load(path.read_text())
        assert ExperimentConfig.model_validate(raw).blocks.cpu_sets is not None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity only")
@pytest.mark.process
def test_pin_tree_moves_every_thread_of_a_running_child() -> None:
    import subprocess
    import sys
    import time

    from abserve.arms.pinning import pin_tree, tree_affinities

    cpus = sorted(os.sched_getaffinity(0))
    code = ("import threading, time\n"
            "for _ in range(3): threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        pin_tree(proc.pid, cpus[:1])
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(tids) >= 4
        assert all(os.sched_getaffinity(t) == {cpus[0]} for t in tids)
        assert tree_affinities(proc.pid) == [{cpus[0]}] * len(tids)
    finally:
        proc.kill()
        proc.wait()
