"""Packaged configs by name, and paths in a config resolved relative to the file naming them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abserve.base.packaged import (
    PackagedError,
    available,
    file_name_stem,
    is_name,
    packaged,
    packaged_root,
    resolve_config,
)
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


@given(name=st.sampled_from(available("experiment")), suffix=st.sampled_from(["", ".yaml", ".yml"]),
       folder=st.sampled_from(["", "configs/local", "deep/er/down"]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_file_name_not_beside_the_config_is_the_packaged_config_of_its_stem(
    tmp_path: Path, name: str, suffix: str, folder: str
) -> None:
    """``extends: gpu-qwen2.5-vl-3b.yaml`` (or ``.yml``, or the bare name) from any folder that
    lacks the file is the shipped config; a file of that name beside the config wins."""
    base = tmp_path / folder
    base.mkdir(parents=True, exist_ok=True)
    assert resolve_config(name + suffix, relative_to=base) == packaged(name, "experiment")
    (base / f"{name}{suffix or '.yaml'}").write_text("name: mine\n")
    if suffix:
        assert resolve_config(name + suffix, relative_to=base) == base / f"{name}{suffix}"
    (base / f"{name}{suffix or '.yaml'}").unlink()


def test_a_file_name_resolves_by_kind_and_an_unknown_one_is_left_to_the_reader(tmp_path: Path) -> None:
    assert resolve_config("gpu.yaml", "policy", tmp_path) == packaged("gpu", "policy")
    assert resolve_config("many-items.yml", "traffic", tmp_path) == packaged("many-items", "traffic")
    assert resolve_config("no-such.yaml", relative_to=tmp_path) == tmp_path / "no-such.yaml"
    assert resolve_config("policy/gpu.yaml", relative_to=tmp_path) == tmp_path / "policy/gpu.yaml"
    assert file_name_stem("gpu-qwen2.5-vl-3b.yaml") == "gpu-qwen2.5-vl-3b"
    assert file_name_stem("gpu-qwen2.5-vl-3b") is None  # a bare name: rule 5
    assert file_name_stem("a/b.yaml") is None
    assert file_name_stem(".yaml") is None


@pytest.mark.parametrize("extends", ["gpu-qwen2.5-vl-3b.yaml", "gpu-qwen2.5-vl-3b"])
def test_a_copy_of_the_template_under_configs_local_extends_the_shipped_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extends: str
) -> None:
    """What docs/gpu.md tells a user to do: copy the template to configs/local/ and run it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs" / "local").mkdir(parents=True)
    text = (ROOT / "configs/gpu-own-change.yaml").read_text().replace(
        "extends: gpu-qwen2.5-vl-3b.yaml", f"extends: {extends}")
    (tmp_path / "configs/local/my-change.yaml").write_text(text)
    config = load_experiment("configs/local/my-change.yaml")
    assert config.name == "gpu-own-change"
    assert config.model.id == "Qwen/Qwen2.5-VL-3B-Instruct"  # from the shipped 3B config
    assert config.policy == packaged("gpu", "policy")
