"""What a real host brings to the stack: arms that run as the host user, and SELinux labels.

An upstream vLLM image may run as a user of its own; docker-compose.yml runs every arm as the
host user (``ABSERVE_UID:ABSERVE_GID``, the owner ``prepare`` gives ``runs/<id>/`` and the user
``model-fetch`` writes the model cache as), with HOME and both caches outside ``/root`` (which a
non-root user cannot enter), vLLM's cache volume made writable for any user by the image. Every
bind mount carries ``z`` (a shared SELinux label), which Docker ignores where SELinux is off.
Resolved by real Docker Compose (``docker compose config`` needs no engine), for the GPU file
alone and with the CPU override.
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from tests.unit.deploy.test_compose import ENV_EXAMPLE, compose_binary

from abserve.deploy.compose_env import extra_arms_compose, load_experiment

ROOT = Path(__file__).resolve().parents[3]
ARMS = ("vllm-a", "vllm-b", "vllm-a2")
HOST_USER = "ABSERVE_UID=4321\nABSERVE_GID=4322\nCOMPOSE_PROFILES=noise-floor\n"


@cache
def services(cpu: bool) -> dict[str, Any]:
    """The resolved services for .env.example with a host user of uid 4321, gid 4322."""
    env_file = Path(os.environ.get("TMPDIR", "/tmp")) / "abserve-test-host-user.env"
    env_file.write_text(HOST_USER)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
    clean |= {"HOME": "/nonexistent-home", "ABSERVE_HOST_PYTHON": "/opt/python3.11",
              "ABSERVE_HOST_PROJECT": str(ROOT)}
    files = ["-f", "docker-compose.yml", *(["-f", "docker-compose.cpu.yml"] if cpu else [])]
    cmd = [str(compose_binary()), "--project-directory", str(ROOT), *files, "--env-file", str(ENV_EXAMPLE),
           "--env-file", str(env_file), "config", "--format", "json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean, check=False)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout)["services"])


def target_of(service: dict[str, Any], source_end: str) -> str:
    (target,) = [m["target"] for m in service["volumes"] if str(m["source"]).endswith(source_end)]
    return str(target)


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu-override"])
@pytest.mark.process
def test_every_arm_runs_as_the_host_user_whatever_its_images_user(cpu: bool) -> None:
    resolved = services(cpu)
    assert resolved["prepare"]["environment"]["ABSERVE_UID"] == "4321"  # runs/<id>/ is theirs
    assert resolved["model-fetch"]["user"] == resolved["orchestrator"]["user"] == "4321:4322"
    for name in ARMS:
        arm = resolved[name]
        assert arm["user"] == "4321:4322", name
        env = arm["environment"]
        assert env["HOME"] == "/tmp"
        assert env["HF_HOME"] == target_of(arm, "huggingface") == "/hf-cache"
        (vllm_cache,) = [m for m in arm["volumes"] if m["type"] == "volume"]
        assert env["VLLM_CACHE_ROOT"] == vllm_cache["target"] == "/vllm-cache"
        assert env["ABSERVE_TELEMETRY_DIR"] == "/telemetry"
        assert not [m["target"] for m in arm["volumes"] if m["target"].startswith("/root")], name


def test_the_images_vllm_cache_folder_is_writable_for_any_user() -> None:
    # A new named volume takes the owner and mode of the image's folder it is mounted on.
    dockerfile = (ROOT / "docker" / "vllm.Dockerfile").read_text()
    assert "RUN mkdir -p /vllm-cache && chmod 1777 /vllm-cache" in dockerfile
    host_runtime = (ROOT / "scripts" / "compose-images.sh").read_text()  # the CPU override's image
    assert 'chmod 1777 "$root/tmp" "$root/var/tmp" "$root/vllm-cache"' in host_runtime


def test_an_extra_arm_runs_as_the_host_user_too(tmp_path: Path) -> None:
    config = tmp_path / "three.yaml"
    config.write_text(f"extends: {ROOT / 'configs' / 'gpu-qwen2.5-vl-3b.yaml'}\n"
                      "arms:\n  c: {lookup: hybrid, role: candidate}\n")
    text = extra_arms_compose(load_experiment(config), (ROOT / "docker-compose.yml").read_text())
    assert 'user: ${ABSERVE_UID:-1000}:${ABSERVE_GID:-1000}' in text
    assert "vllm-cache-c:/vllm-cache" in text


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu-override"])
@pytest.mark.process
def test_every_bind_mount_of_the_stack_is_labelled_for_selinux(cpu: bool) -> None:
    # The CPU override's own mounts (the host's /usr, its Python, the project) are never
    # relabelled: Docker refuses to relabel /usr, and they exist only on this CPU machine.
    override = {"/usr", "/opt/python3.11", str(ROOT)}
    checked = 0
    for name, service in services(cpu).items():
        for mount in service.get("volumes", []):
            if mount["type"] != "bind" or mount["source"] in override:
                continue
            checked += 1
            assert mount.get("bind", {}).get("selinux") == "z", (name, mount["target"])
    assert checked == 12  # prepare, hf-cache-init, model-fetch: 1 each; orchestrator 3; each arm 2


@pytest.mark.process
def test_prepare_hands_each_arms_telemetry_folder_to_the_host_user(tmp_path: Path) -> None:
    # prepare runs as root; the arms as the host user, so their folders must be that user's.
    # A recording chown first on PATH (the test needs no root), the real one after it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "chown.log"
    (bin_dir / "chown").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n')
    (bin_dir / "chown").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ABSERVE_RUNS_ROOT": str(tmp_path / "runs"),
           "ABSERVE_RUN_ID": "r1", "ABSERVE_UID": "4321", "ABSERVE_GID": "4322", "ABSERVE_ARMS": "a b c"}
    done = subprocess.run(["sh", str(ROOT / "docker" / "prepare-run.sh")], env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "runs" / "r1"
    assert log.read_text().splitlines() == [f"4321:4322 {tmp_path / 'runs'} {run}",
                                            f"-R 4321:4322 {run / 'telemetry'}"]
    assert sorted(p.name for p in (run / "telemetry").iterdir()) == ["a", "b", "c"]
