"""Per-arm images, args and lookups on a GPU host (issue 14 item 6), checked without a Docker engine.

``abserve.deploy.compose_env`` turns each arm of a config (``image:``, ``args:``, ``lookup:``,
``mutant:``) into that arm's compose variables; real Docker Compose (``config`` needs no engine)
resolves them, for the GPU file alone and with the CPU override, into each arm service's image,
command, lookup and mutant; ``scripts/signoff.sh`` runs for real with a recording fake
``docker`` and builds each arm's image. The engine-backed stack is tests/compose_stack.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.deploy.test_compose import ENV_EXAMPLE, compose_binary, run_compose
from tests.unit.deploy.test_compose_scripts import calls, fake

from abserve.deploy.compose_env import ComposeExperiment, compose_env, image_tag, render_env_file

ROOT = Path(__file__).resolve().parents[3]
RELEASE = ROOT / "configs" / "gpu-release.yaml"
ARMS_ARGS = {"--max-num-seqs": 8, "--limit-mm-per-prompt": {"image": 4}, "--enforce-eager": True}


def release_raw() -> dict[str, Any]:
    return dict(yaml.safe_load(RELEASE.read_text()))


def two_images() -> dict[str, Any]:
    """The release config with arm b given its own args and the hybrid lookup."""
    raw = release_raw()
    raw["arms"]["b"] |= {"args": ARMS_ARGS, "lookup": "hybrid"}
    return raw


def derived(raw: dict[str, Any]) -> dict[str, str]:
    return compose_env(ComposeExperiment.model_validate(raw), "configs/gpu-release.yaml")


def resolve(env: dict[str, str], tmp_path: Path, *, cpu: bool = False) -> dict[str, Any]:
    """The services real Compose resolves from .env.example plus ``env`` (an env file)."""
    path = tmp_path / "derived.env"
    path.write_text(render_env_file(env))
    if not cpu:
        result = run_compose("config", "--format", "json", env_files=[ENV_EXAMPLE, path])
    else:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
        clean |= {"HOME": "/nonexistent-home",
                  "ABSERVE_HOST_PYTHON": "/opt/python3.11", "ABSERVE_HOST_PROJECT": str(ROOT)}
        cmd = [str(compose_binary()), "--project-directory", str(ROOT), "-f", "docker-compose.yml",
               "-f", "docker-compose.cpu.yml", "--env-file", str(ENV_EXAMPLE), "--env-file", str(path),
               "config", "--format", "json"]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean, check=False)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout)["services"])


# ---- compose_env: per-arm variables --------------------------------------------------------


def test_a_two_image_config_gives_each_arm_its_image_tag_args_and_lookup() -> None:
    env = derived(two_images())
    assert env["ABSERVE_VLLM_IMAGE_A"] == env["ABSERVE_VLLM_IMAGE_A2"] == "vllm/vllm-openai:v0.32.0"
    assert env["ABSERVE_VLLM_IMAGE_B"] == "vllm/vllm-openai:v0.33.0"
    assert env["ABSERVE_VLLM_TAG_A"] == env["ABSERVE_VLLM_TAG_A2"] != env["ABSERVE_VLLM_TAG_B"]
    assert env["ABSERVE_VLLM_TAG_B"].startswith("vllm-vllm-openai-v0.33.0-")
    assert shlex.split(env["VLLM_ARM_ARGS_B"]) == [
        "--max-num-seqs=8", '--limit-mm-per-prompt={"image":4}', "--enforce-eager"]
    assert env["VLLM_ARM_ARGS_A"] == env["VLLM_ARM_ARGS_A2"] == ""
    assert (env["ABSERVE_LOOKUP_A"], env["ABSERVE_LOOKUP_B"], env["ABSERVE_LOOKUP_A2"]) == (
        "bisect", "hybrid", "bisect")


def test_an_arm_without_image_falls_back_to_the_shared_image_and_an_absent_arm_is_empty() -> None:
    raw = two_images()
    for arm in ("a", "b"):
        raw["arms"][arm].pop("image")
    raw["arms"].pop("a2")  # router.arms is derived
    env = derived(raw)
    empty = ["ABSERVE_VLLM_IMAGE_A", "ABSERVE_VLLM_TAG_A", "ABSERVE_VLLM_IMAGE_B", "ABSERVE_VLLM_TAG_B",
             "ABSERVE_VLLM_IMAGE_A2", "ABSERVE_VLLM_TAG_A2", "VLLM_ARM_ARGS_A2", "ABSERVE_LOOKUP_A2"]
    assert {k: env[k] for k in empty} == dict.fromkeys(empty, "")
    assert env["ABSERVE_ARMS"] == "a b"


def test_image_tags_are_valid_docker_tags_and_differ_by_reference() -> None:
    refs = ["vllm/vllm-openai:v0.33.0", "vllm-vllm-openai:v0.33.0",
            "registry.example:5000/team/vllm:v0.33.0@sha256:" + "ab" * 32, "x" * 250]
    tags = [image_tag(ref) for ref in refs]
    assert len(set(tags)) == len(tags)
    for tag in tags:
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag), tag


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"--gpu-memory-utilization": 0.9}, "set by docker-compose.yml"),
        ({"--port": 9000}, "set by docker-compose.yml"),
        ({"--allowed-local-media-path": "/"}, "forbidden"),
        ({"--hf-token": "hf_abcdefghijklmnopqrstuvwxyz012345"}, "looks like a secret"),
        ({"--hf-token": "${HF_TOKEN}"}, r"arms.b.args: --hf-token is a \$\{VAR\} reference"),
        ({"--no-enable-prefix-caching": False}, "false cannot undo server.args"),
    ],
)
def test_per_arm_args_are_checked_like_the_shared_ones(args: dict[str, Any], message: str) -> None:
    raw = two_images()
    raw["arms"]["b"]["args"] = args
    with pytest.raises(ValueError, match=message):
        ComposeExperiment.model_validate(raw)


def test_a_per_arm_env_is_refused_with_the_alternatives_named() -> None:
    raw = two_images()
    raw["arms"]["b"]["env"] = {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    with pytest.raises(ValueError, match="arm 'b': env: cannot apply under docker compose") as info:
        ComposeExperiment.model_validate(raw)
    for alternative in ("server.env", "args:", "image:", "abserve run"):
        assert alternative in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"image": None, "venv": ".abserve/venvs/x"}, "arm 'b': venv: cannot apply under docker compose"),
        ({"mutant": "slow", "mutant_env": {"ABSERVE_MUTANT_DELAY_US": "5"}},
         "arm 'b': mutant_env: cannot apply"),
        ({"cpus": [1]}, "ABSERVE_GPU_<ARM>"),
        ({"image": "vllm/vllm-openai:$TAG"}, "is not an image reference"),
    ],
)
def test_what_compose_cannot_run_per_arm_is_refused(edit: dict[str, Any], message: str) -> None:
    raw = two_images()
    raw["arms"]["b"] |= edit
    with pytest.raises(ValueError, match=message):
        ComposeExperiment.model_validate(raw)


# ---- docker-compose.yml resolved by real Compose -------------------------------------------


@pytest.mark.process
def test_compose_runs_arm_b_from_its_own_image_with_its_args_and_lookup(tmp_path: Path) -> None:
    env = derived(two_images())
    services = resolve(env, tmp_path)
    a, b, a2 = services["vllm-a"], services["vllm-b"], services["vllm-a2"]
    assert b["build"]["args"]["VLLM_IMAGE"] == "vllm/vllm-openai:v0.33.0"
    assert a["build"]["args"]["VLLM_IMAGE"] == a2["build"]["args"]["VLLM_IMAGE"] == "vllm/vllm-openai:v0.32.0"
    assert b["image"] == f"abserve/vllm-b:{env['ABSERVE_VLLM_TAG_B']}"
    assert len({a["image"], b["image"], a2["image"]}) == 3, "each arm its own image"
    assert services["model-fetch"]["image"] == a["image"]
    assert services["model-fetch"]["build"] == a["build"]
    # The arms share every word of the command but arm b's own args, which come last.
    assert b["command"] == a["command"] + shlex.split(env["VLLM_ARM_ARGS_B"])
    assert a["command"] == a2["command"]
    assert b["command"][-3:] == ["--max-num-seqs=8", '--limit-mm-per-prompt={"image":4}', "--enforce-eager"]
    lookups = [services[s]["environment"]["ABSERVE_MM_LOOKUP"] for s in ("vllm-a", "vllm-b", "vllm-a2")]
    assert lookups == ["bisect", "hybrid", "bisect"]
    assert [services[s]["environment"]["ABSERVE_MUTANT"] for s in ("vllm-a", "vllm-b", "vllm-a2")] == [""] * 3
    assert services["orchestrator"]["command"][0] == "/app/configs/gpu-release.yaml"


@pytest.mark.process
def test_without_per_arm_values_compose_runs_todays_stack(tmp_path: Path) -> None:
    services = resolve({}, tmp_path)  # .env.example alone: the 3B config's environment
    assert [services[s]["build"]["args"]["VLLM_IMAGE"] for s in ("vllm-a", "vllm-b")] == [
        "vllm/vllm-openai:v0.33.0"] * 2
    assert [services[s]["image"] for s in ("vllm-a", "vllm-b")] == [
        "abserve/vllm-a:v0.33.0", "abserve/vllm-b:v0.33.0"]
    assert services["vllm-a"]["command"] == services["vllm-b"]["command"]
    assert services["vllm-b"]["environment"]["ABSERVE_MM_LOOKUP"] == "bisect"
    assert services["orchestrator"]["command"][0] == "/app/configs/gpu-qwen2.5-vl-3b.yaml"


@pytest.mark.process
def test_the_cpu_override_keeps_the_cpu_image_and_the_arms_own_args_and_lookup(tmp_path: Path) -> None:
    services = resolve(derived(two_images()), tmp_path, cpu=True)
    for name, service in services.items():
        assert service["image"] == "abserve/host-runtime:local", name
        assert "build" not in service, name  # nothing is built: the host's /usr, Python, project
        mounts = {m["target"]: (m["source"], m.get("read_only", False)) for m in service["volumes"]}
        assert mounts["/usr"] == ("/usr", True), name
        assert mounts["/opt/python3.11"] == ("/opt/python3.11", True), name
        assert mounts[str(ROOT)] == (str(ROOT), True), name
    for name in ("vllm-a", "vllm-b", "vllm-a2"):
        assert "deploy" not in services[name], name
        # The CPU arms start together (no GPU memory to size the KV cache from).
        assert list(services[name]["depends_on"]) == ["model-fetch"], name
    assert services["vllm-b"]["command"][-1] == "--enforce-eager"
    assert services["vllm-b"]["environment"]["ABSERVE_MM_LOOKUP"] == "hybrid"
    assert services["vllm-b"]["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"


# ---- an arm without a lookup runs vLLM untouched; a mutant reaches its arm ------------------


@pytest.mark.process
def test_an_arm_without_lookup_runs_vllm_untouched_and_a_mutant_reaches_its_arm(tmp_path: Path) -> None:
    raw = two_images()
    raw["arms"]["a"]["lookup"] = None  # a change that is not the lookup: vLLM untouched
    raw["arms"]["b"] |= {"lookup": "bisect", "mutant": "drop-straddle"}
    services = resolve(derived(raw), tmp_path)
    environments = {s: services[s]["environment"] for s in ("vllm-a", "vllm-b", "vllm-a2")}
    assert {s: (e["ABSERVE_MM_LOOKUP"], e["ABSERVE_MUTANT"]) for s, e in environments.items()} == {
        "vllm-a": ("", ""), "vllm-b": ("bisect", "drop-straddle"), "vllm-a2": ("bisect", "")}
    # No default lookup is left in the compose file: an empty variable is an untouched arm.
    empty = resolve({"ABSERVE_LOOKUP_A": "", "ABSERVE_LOOKUP_B": ""}, tmp_path)
    assert empty["vllm-a"]["environment"]["ABSERVE_MM_LOOKUP"] == ""
    assert empty["vllm-b"]["environment"]["ABSERVE_MM_LOOKUP"] == ""


# ---- scripts/signoff.sh builds the arms' images from the derived environment ---------------


SIGNOFF_DOCKER = """
args = sys.argv[1:]
if "abserve.deploy.compose_env" in args:
    print("ABSERVE_CONFIG=configs/gpu-release.yaml")
    print("ABSERVE_ARMS=a b a2")
elif "ps" in args and "-q" in args:
    print("cid")
elif "ps" in args:
    print("orchestrator exited")
elif args[0] == "inspect":
    print("2026-12-01T11:40:41.1Z")
"""


@pytest.mark.process
def test_signoff_builds_each_arms_image_after_deriving_the_environment(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "configs").mkdir()
    (tree / "scripts" / "signoff.sh").write_text((ROOT / "scripts" / "signoff.sh").read_text())
    (tree / "configs" / "gpu-release.yaml").write_text("name: x\n")
    (tree / ".env").write_text("ABSERVE_RUNS_DIR=./runs\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "docker", SIGNOFF_DOCKER)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "HOME": str(tmp_path),
           "ABSERVE_SKIP_PREFLIGHT": "1"}  # the GPU preflight: tests/unit/deploy/test_preflight_*.py
    result = subprocess.run(["bash", str(tree / "scripts" / "signoff.sh"), "configs/gpu-release.yaml"],
                            env=env, cwd=tree, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    made = calls(log)
    builds = [i for i, c in enumerate(made) if "build" in c]
    derive = next(i for i, c in enumerate(made) if "abserve.deploy.compose_env" in c)
    assert made[builds[0]][-2:] == ["build", "prepare"]
    assert builds[0] < derive
    arms_build = made[builds[1]]
    assert builds[1] > derive
    assert any(a.endswith("/compose.env") for a in arms_build)
    assert arms_build[arms_build.index("build") + 1:] == ["model-fetch", "vllm-a", "vllm-b", "vllm-a2"]
