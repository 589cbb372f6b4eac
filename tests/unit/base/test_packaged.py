"""Packaged configs by name, and paths in a config resolved relative to the file naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.base.packaged import PackagedError, available, is_name, packaged, packaged_root, resolve_config
from abserve.compare import PolicyError, load_policy
from abserve.config import load_experiment
from abserve.runs.selftest import load_selftest
from abserve.traffic.profiles import load_profile, resolve_profile_path

ROOT = Path(__file__).resolve().parents[3]
PAIR = "arms:\n  a: {lookup: linear}\n  b: {lookup: bisect}\n"
LOAD = "load:\n  profiles:\n    - {profile: many-items, requests: 4}\n"


def test_the_packaged_configs_are_the_repositorys() -> None:
    for name in ("policy/cpu-default.yaml", "traffic/many-items.yaml", "cpu-default.yaml", "selftest.yaml"):
        assert (packaged_root() / name).read_bytes() == (ROOT / "configs" / name).read_bytes()
    assert {"cpu-default", "gpu", "default", "by-hand"} <= set(available("policy"))
    assert "multi-image-long-context" in available("traffic")


def test_bare_names_and_paths_are_told_apart() -> None:
    assert is_name("cpu-default")
    assert is_name("gpu")
    assert not is_name("cpu-default.yaml")
    assert not is_name("policy/gpu")
    assert not is_name("..")


def test_a_bare_name_on_the_command_line_is_the_packaged_config(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_config("cpu-default") == packaged_root() / "cpu-default.yaml"
    assert resolve_config("gpu", "policy") == packaged_root() / "policy" / "gpu.yaml"
    (tmp_path / "cpu-default").write_text("name: mine\n")
    assert resolve_config("cpu-default") == Path("cpu-default")  # an existing file wins
    with pytest.raises(PackagedError, match=r"known: .*cpu-default"):
        packaged("no-such-policy", "policy")


def test_a_repository_path_outside_the_checkout_is_the_packaged_file(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_config("configs/policy/gpu.yaml", "policy") == packaged_root() / "policy" / "gpu.yaml"
    assert resolve_config("configs/nope.yaml") == Path("configs/nope.yaml")  # left to be reported


def test_paths_in_a_config_are_relative_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "exp"
    (folder / "pol").mkdir(parents=True)
    (folder / "pol" / "mine.yaml").write_text("extends: gpu\nname: mine\n")
    (folder / "model").mkdir()
    (folder / "base.yaml").write_text(
        f"name: base\npolicy: pol/mine.yaml\nmodel: {{path: model}}\n{PAIR}{LOAD}")
    (folder / "child.yaml").write_text("extends: base.yaml\nname: child\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_experiment(folder / "child.yaml")
    assert config.policy == folder / "pol" / "mine.yaml"  # set by base.yaml: relative to base.yaml
    assert config.model.path == folder / "model"
    policy = load_policy(config.policy)
    assert policy.name == "mine"
    assert policy.sequential == load_policy("gpu").sequential  # the packaged policy it extends


def test_a_generated_model_path_stays_relative_to_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(f"name: x\npolicy: cpu-default\n{PAIR}{LOAD}")
    config = load_experiment(tmp_path / "x.yaml")
    assert config.model.path == Path(".abserve/models/tiny-llava")  # where abserve builds it
    assert config.policy == packaged_root() / "policy" / "cpu-default.yaml"


def test_an_unknown_packaged_policy_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(f"name: x\npolicy: no-such\n{PAIR}{LOAD}")
    with pytest.raises(ValueError, match=r"x\.yaml: no packaged policy config named 'no-such'"):
        load_experiment(tmp_path / "x.yaml")
    with pytest.raises(PolicyError, match="no packaged policy config"):
        load_policy("no-such")


def test_a_config_without_a_policy_gets_the_packaged_default(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(f"name: x\n{PAIR}{LOAD}")
    assert load_experiment(tmp_path / "x.yaml").policy == packaged_root() / "policy" / "default.yaml"


def test_the_repositorys_configs_still_load_from_the_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    config = load_experiment("configs/cpu-default.yaml")
    assert config.policy.read_bytes() == (ROOT / "configs/policy/cpu-default.yaml").read_bytes()
    selftest = load_selftest(Path("selftest"))  # the packaged one, by name
    assert selftest.policy.read_bytes() == (ROOT / "configs/policy/selftest.yaml").read_bytes()
    assert all(path.is_file() for path in selftest.experiments.values())


def test_a_traffic_profile_file_named_by_a_config_is_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text((ROOT / "configs/traffic/many-items.yaml").read_text())
    (tmp_path / "x.yaml").write_text(
        f"name: x\n{PAIR}load:\n  profiles:\n    - {{profile: mine.yaml, requests: 4}}\n"
        "    - {profile: interleaved, requests: 4}\n")
    profiles = [item.profile for item in load_experiment(tmp_path / "x.yaml").load.profiles]
    assert profiles == [str(tmp_path / "mine.yaml"), "interleaved"]  # a name stays a label
    assert resolve_profile_path("interleaved") == packaged_root() / "traffic" / "interleaved.yaml"
    assert load_profile(profiles[0]) == load_profile("many-items")
