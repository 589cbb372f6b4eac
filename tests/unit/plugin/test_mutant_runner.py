"""Mutants that need vLLM's V1 model runner are refused under Model Runner V2, by name.

Model Runner V2 (the GPU default, ``VLLM_USE_V2_MODEL_RUNNER=1``) looks the multimodal window up
only for prefilling requests and has no ``GPUModelRunner``, so ``decode-stall``, ``slow``,
``dense-slow`` and ``embed-fault`` would inject nothing there
(``abserve.vllm_plugin.mutants.V1_RUNNER_ONLY``).
The config reader refuses such an arm when the config asks for V2; compose's reader also when the
config leaves the runner unset (docker-compose.yml passes ``${VLLM_USE_V2_MODEL_RUNNER:-1}``).
The shipped configs are read as they are: none of them may be refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.config import ConfigError, load_experiment
from abserve.deploy.compose_env import load_experiment as load_for_compose
from abserve.vllm_plugin.mutants import MUTANTS, V1_RUNNER_ONLY

ROOT = Path(__file__).resolve().parents[3]
GPU_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"
CPU_MUTANTS = [*sorted((ROOT / "configs").glob("mutant-*.yaml")), ROOT / "configs" / "embed-fault-proof.yaml",
               *sorted((ROOT / "configs" / "selftest").glob("*.yaml"))]


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "mutant.yaml"
    path.write_text(body)
    return path


def gpu_mutant(tmp_path: Path, mutant: str, runner: str) -> Path:
    """The shipped 3B GPU config with arm b a mutant and the runner set under server.env (empty:
    unset, as compose reads it: ``${VLLM_USE_V2_MODEL_RUNNER:-1}``)."""
    env = f"server: {{env: {{VLLM_USE_V2_MODEL_RUNNER: \"{runner}\"}}}}\n"
    return write(tmp_path, f"extends: {GPU_3B}\n{env}arms:\n  b: {{lookup: linear, mutant: {mutant}}}\n")


def test_the_v1_only_mutants_are_mutants_and_the_others_are_kept() -> None:
    assert set(V1_RUNNER_ONLY) == {"decode-stall", "slow", "dense-slow", "embed-fault", "batch-tax"}
    assert set(V1_RUNNER_ONLY) < set(MUTANTS)


@pytest.mark.parametrize("mutant", sorted(V1_RUNNER_ONLY))
def test_compose_refuses_a_v1_only_mutant_under_its_default_runner_naming_it(
    tmp_path: Path, mutant: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_for_compose(gpu_mutant(tmp_path, mutant, ""))
    message = str(caught.value)
    assert f"arm 'b': mutant {mutant} needs the V1 model runner, not Model Runner V2 " \
           "(VLLM_USE_V2_MODEL_RUNNER unset: compose's default)" in message
    assert message.rstrip().endswith('set VLLM_USE_V2_MODEL_RUNNER: "0" under server.env')


@pytest.mark.parametrize("mutant", sorted(V1_RUNNER_ONLY))
def test_any_reader_refuses_a_v1_only_mutant_when_the_config_asks_for_v2(
    tmp_path: Path, mutant: str
) -> None:
    # gpu-qwen2.5-vl-3b.yaml itself sets VLLM_USE_V2_MODEL_RUNNER: "1"
    for read in (load_experiment, load_for_compose):
        with pytest.raises(ConfigError, match=f"mutant {mutant} needs the V1 model runner, not Model "
                                              r"Runner V2 \(VLLM_USE_V2_MODEL_RUNNER=1\)"):
            read(gpu_mutant(tmp_path, mutant, "1"))


@pytest.mark.parametrize("mutant", sorted(V1_RUNNER_ONLY))
def test_a_v1_only_mutant_runs_when_the_config_sets_the_v1_runner(tmp_path: Path, mutant: str) -> None:
    experiment = load_for_compose(gpu_mutant(tmp_path, mutant, "0"))
    assert experiment.arms["b"].mutant == mutant


@pytest.mark.parametrize("mutant", sorted(set(MUTANTS) - set(V1_RUNNER_ONLY)))
def test_mutants_that_work_under_v2_are_not_refused(tmp_path: Path, mutant: str) -> None:
    assert load_for_compose(gpu_mutant(tmp_path, mutant, "")).arms["b"].mutant == mutant


def test_a_local_config_that_leaves_the_runner_unset_keeps_vllms_choice(tmp_path: Path) -> None:
    # A CPU machine runs the V1 runner (MRV2 needs Triton): the CPU mutant configs say nothing.
    config = write(tmp_path, f"extends: {ROOT / 'configs' / 'mutant-decode-stall.yaml'}\n")
    assert load_experiment(config).arms["b"].mutant == "decode-stall"
    per_arm = write(tmp_path, f"extends: {ROOT / 'configs' / 'mutant-decode-stall.yaml'}\n"
                              "arms:\n  b: {env: {VLLM_USE_V2_MODEL_RUNNER: \"1\"}}\n")
    with pytest.raises(ConfigError, match="arm 'b': mutant decode-stall needs the V1 model runner"):
        load_experiment(per_arm)


@pytest.mark.parametrize("config", CPU_MUTANTS, ids=lambda p: p.name)
def test_the_shipped_mutant_configs_still_load(config: Path) -> None:
    load_experiment(config)
