"""How ``abserve.deploy.compose_env`` reads a config for the orchestrator service (issue 46).

One reader of experiment files (``abserve.config``: ``extends:``, paths relative to the file),
a stricter schema for what compose can run: router arms derived when left out, an arm without
a lookup (vLLM untouched) or with a test-only mutant rendered for its service, and every file
the run reads in a folder the stack mounts (``configs/`` or ``traffic/`` of the checkout, the
current directory here: each test works in its own ``tmp_path`` checkout).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml

from abserve import config as experiments
from abserve.deploy.compose_env import ComposeExperiment, compose_env, load_experiment, main

ROOT = Path(__file__).resolve().parents[3]
CONFIG_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout's mounted folders in ``tmp_path``, the current directory."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "traffic").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(checkout: Path, name: str, text: str) -> Path:
    path = checkout / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def three_lines(checkout: Path, arms: str) -> Path:
    """``configs/mine.yaml``: the 3B config, renamed, with ``arms`` merged over its arms."""
    return write(checkout, "configs/mine.yaml", f"extends: {CONFIG_3B}\nname: mine\narms: {arms}\n")


def test_a_config_that_extends_one_is_read_as_abserve_reads_it(checkout: Path) -> None:
    path = three_lines(checkout, "{b: {lookup: hybrid}}")
    composed = load_experiment(Path("configs/mine.yaml"))
    assert isinstance(composed, ComposeExperiment)
    assert composed.model_dump() == experiments.load_experiment(path).model_dump()
    assert composed.name == "mine"
    assert (composed.arms["a"].lookup, composed.arms["b"].lookup) == ("linear", "hybrid")
    env = compose_env(composed, "configs/mine.yaml")
    assert env["ABSERVE_CONFIG"] == "configs/mine.yaml"
    assert env["ABSERVE_MODEL"] == "Qwen/Qwen2.5-VL-3B-Instruct"  # from the file it extends
    assert env["ABSERVE_LOOKUP_B"] == "hybrid"


def test_router_arms_are_derived_when_left_out() -> None:
    raw = yaml.safe_load(CONFIG_3B.read_text())
    assert "arms" not in raw["router"]  # the shipped config leaves them out
    experiment = ComposeExperiment.model_validate(raw)
    assert "arms" not in experiment.router  # the orchestrator's own router serves the services
    assert compose_env(experiment, "configs/x.yaml")["ABSERVE_ARMS"] == "a b a2"


def test_router_arms_given_must_name_every_arm() -> None:
    raw = yaml.safe_load(CONFIG_3B.read_text())
    raw["arms"]["c"] = {"lookup": "bisect", "role": "candidate"}
    raw["router"]["arms"] = {arm: {"url": f"http://vllm-{arm}:8000"} for arm in ("a", "b", "a2")}
    with pytest.raises(ValueError, match="arm c has no router entry") as caught:
        ComposeExperiment.model_validate(raw)
    assert "http://vllm-c:8000" in str(caught.value)
    assert "leave router.arms out" in str(caught.value)


def test_a_traffic_file_outside_the_mounted_folders_is_refused_naming_them(checkout: Path) -> None:
    line = '{"model": "qwen2.5-vl-3b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}\n'
    write(checkout, "elsewhere/mine.jsonl", line)
    write(checkout, "traffic/mine.jsonl", line)
    profiles = "load: {profiles: [{kind: file, file: {path: %s}}]}\n"
    outside = write(checkout, "configs/outside.yaml",
                    f"extends: {CONFIG_3B}\n" + profiles % "../elsewhere/mine.jsonl")
    with pytest.raises(ValueError, match="outside the folders docker compose mounts") as caught:
        load_experiment(outside)
    assert "configs/, traffic/ of this checkout" in str(caught.value)
    inside = write(checkout, "configs/inside.yaml",
                   f"extends: {CONFIG_3B}\n" + profiles % "../traffic/mine.jsonl")
    (item,) = load_experiment(inside).load.profiles
    assert item.kind == "file"


def test_an_arm_without_lookup_and_an_arm_with_a_mutant_are_rendered(checkout: Path) -> None:
    untouched = load_experiment(three_lines(checkout, "{b: {lookup: null}}"))
    env = compose_env(untouched, "configs/mine.yaml")
    assert (env["ABSERVE_LOOKUP_B"], env["ABSERVE_MUTANT_B"]) == ("", "")  # vLLM untouched
    assert env["ABSERVE_LOOKUP_A"] == "linear"
    mutant = load_experiment(three_lines(checkout, "{b: {lookup: bisect, mutant: drop-straddle}}"))
    env = compose_env(mutant, "configs/mine.yaml")
    assert (env["ABSERVE_LOOKUP_B"], env["ABSERVE_MUTANT_B"]) == ("bisect", "drop-straddle")
    assert env["ABSERVE_MUTANT_A"] == env["ABSERVE_MUTANT_A2"] == ""


def test_a_mutants_settings_are_refused(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    three_lines(checkout, "{b: {lookup: bisect, mutant: slow, mutant_env: {ABSERVE_MUTANT_DELAY_US: '5'}}}")
    assert main(["configs/mine.yaml"]) == 2
    err = capsys.readouterr().err
    assert "arm 'b': mutant_env: cannot apply under docker compose" in err
    assert "ABSERVE_MUTANT_<ARM>" in err
    assert err.count("\n") == 1  # one line


def test_each_arms_image_is_read_from_the_resolved_compose_file(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = yaml.safe_dump({"services": {
        "vllm-a": {"image": "abserve/vllm-a:v0.33.0"}, "vllm-b": {"image": "abserve/host-runtime:local"},
        "vllm-a2": {"image": "abserve/vllm-a2:v0.33.0"}, "orchestrator": {"image": "abserve/service:local"}}})
    monkeypatch.setattr(sys, "stdin", io.StringIO(resolved))
    assert main([str(CONFIG_3B), "--arm-images"]) == 0
    assert capsys.readouterr().out.split() == [
        "a=abserve/vllm-a:v0.33.0", "b=abserve/host-runtime:local", "a2=abserve/vllm-a2:v0.33.0"]
