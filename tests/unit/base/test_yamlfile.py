"""``extends`` in experiment and policy YAML: merge-patch semantics, cycles refused, and the
shipped A/A' twins differ from the CPU default only where they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.base.packaged import packaged
from abserve.base.yamlfile import YamlFileError, extends_chain, merge, read_mapping
from abserve.compare import PolicyError, load_policy
from abserve.config import load_experiment

REPO = Path(__file__).resolve().parents[3]


def test_merge_patches_mappings_removes_null_mappings_and_replaces_lists() -> None:
    base = {"a": {"x": 1, "y": {"k": 1}}, "b": [1, 2], "c": 3, "d": {"e": 5}}
    patched = merge(base, {"a": {"y": None, "z": 4}, "b": [9], "c": None, "d": None, "f": None})
    assert patched == {"a": {"x": 1, "z": 4}, "b": [9], "c": None, "f": None}


def test_null_in_an_extending_policy_means_none_not_the_default(tmp_path: Path) -> None:
    """``floor: null`` over a parent that names a floor is no floor (the model's default is a2)."""
    (tmp_path / "p.yaml").write_text(f"extends: {REPO / 'configs/policy/default.yaml'}\n"
                                     "arms: {floor: null}\nneighbours: {max_foreign_share: null}\n")
    policy = load_policy(tmp_path / "p.yaml")
    assert load_policy(REPO / "configs/policy/default.yaml").arms.floor == "a2"
    assert policy.arms.floor is None
    assert policy.neighbours.max_foreign_share is None
    assert load_policy(REPO / "configs/policy/lookup-hybrid.yaml").arms.floor is None


def test_extends_chain_and_cycles(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("name: base\nnested: {k: 1, j: 2}\n")
    (tmp_path / "mid.yaml").write_text("extends: base.yaml\nnested: {j: 3}\n")
    (tmp_path / "top.yaml").write_text("extends: mid.yaml\nname: top\n")
    assert read_mapping(tmp_path / "top.yaml") == {"name": "top", "nested": {"k": 1, "j": 3}}
    (tmp_path / "loop.yaml").write_text("extends: loop.yaml\n")
    with pytest.raises(YamlFileError, match="extends itself"):
        read_mapping(tmp_path / "loop.yaml")


def test_an_extending_policy_still_refuses_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(f"extends: {REPO / 'configs/policy/cpu-default.yaml'}\nmin_sample: 3\n")
    with pytest.raises(PolicyError, match="min_sample"):
        load_policy(tmp_path / "p.yaml")


def test_shipped_aa_twin_differs_from_the_cpu_default_only_in_its_arms() -> None:
    default = load_experiment(REPO / "configs/cpu-default.yaml")
    twin = load_experiment(REPO / "configs/aa-default.yaml")
    assert list(twin.arms) == ["a", "a2"]
    assert twin.arms["a2"].lookup == "linear"
    assert twin.load == default.load
    assert twin.budget == default.budget
    assert twin.server == default.server
    policy, aa = load_policy(default.policy), load_policy(twin.policy)
    assert aa.metrics == policy.metrics
    assert aa.sequential == policy.sequential
    assert aa.arms.candidate == "a2"
    assert not aa.improvements
    assert policy.improvements


def test_extends_chain_lists_every_file_read_and_stops_at_a_cycle_or_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("extends: gpu-qwen2.5-vl-3b.yaml\n")  # packaged, by file name
    (tmp_path / "top.yaml").write_text("extends: base.yaml\n")
    chain = extends_chain(tmp_path / "top.yaml")
    assert chain[:2] == [tmp_path / "top.yaml", tmp_path / "base.yaml"]
    assert chain[2] == packaged("gpu-qwen2.5-vl-3b", "experiment")
    (tmp_path / "loop.yaml").write_text("extends: loop.yaml\n")
    assert extends_chain(tmp_path / "loop.yaml") == [tmp_path / "loop.yaml"]
    (tmp_path / "gone.yaml").write_text("extends: missing.yaml\n")
    assert extends_chain(tmp_path / "gone.yaml") == [tmp_path / "gone.yaml", tmp_path / "missing.yaml"]
