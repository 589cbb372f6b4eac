"""Issue 28 items 5 and 6 on the compose stack, checked without a Docker engine.

5. A plain ``docker compose up --build`` works although Docker creates a missing bind-mounted
   Hugging Face cache as root: the one-shot ``hf-cache-init`` (root, no network, that one
   mount) hands the folder to the host user before ``model-fetch`` (the host user) writes
   there; its command runs for real under sh here, with a recording fake ``chown``.
6. Every image compose builds gets the proxy's CA certificates (``EXTRA_CA_CERTS``), and every
   Dockerfile with a pip install uses them for pip and removes them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.unit.deploy.test_compose import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    compose_binary,
    resolved,
    run_compose,
)
from tests.unit.deploy.test_compose_arms import derived, release_raw, resolve
from tests.unit.deploy.test_compose_scripts import calls, fake

ROOT = Path(__file__).resolve().parents[3]
CONFIG_3B = "gpu-qwen2.5-vl-3b.yaml"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"


# ---- 5. hf-cache-init -------------------------------------------------------------------


@pytest.mark.process
def test_model_fetch_waits_for_the_cache_folder_made_by_a_root_one_shot_without_network() -> None:
    services = resolved(CONFIG_3B)["services"]
    init = services["hf-cache-init"]
    assert init["user"] == "0:0"
    assert init["network_mode"] == "none"
    assert "ports" not in init
    assert "networks" not in init
    assert [(m["target"], m["type"]) for m in init["volumes"]] == [("/hf-cache", "bind")]
    fetch = services["model-fetch"]
    (cache,) = [m["source"] for m in fetch["volumes"] if m["target"] == "/hf-cache"]
    assert init["volumes"][0]["source"] == cache, "the folder model-fetch mounts"
    assert fetch["depends_on"]["hf-cache-init"]["condition"] == "service_completed_successfully"
    assert init["environment"] == {"ABSERVE_UID": "1000", "ABSERVE_GID": "1000"}  # .env.example's
    assert init.get("restart", "no") == "no"


@pytest.mark.process
def test_the_cpu_override_runs_hf_cache_init_on_the_host_runtime(tmp_path: Path) -> None:
    services = resolve(derived(release_raw()), tmp_path, cpu=True)
    init = services["hf-cache-init"]
    assert init["image"] == "abserve/host-runtime:local"
    assert "build" not in init
    assert init["user"] == "0:0"
    assert init["network_mode"] == "none"
    targets = {m["target"] for m in init["volumes"]}
    assert "/hf-cache" in targets
    assert "/usr" in targets
    assert services["model-fetch"]["depends_on"]["hf-cache-init"]["condition"] == (
        "service_completed_successfully")


def run_init(tmp_path: Path, cache: Path) -> tuple[int, str, list[list[str]]]:
    """hf-cache-init's resolved command, run under sh with the cache at ``cache``."""
    (script,) = resolved(CONFIG_3B)["services"]["hf-cache-init"]["command"]
    script = script.replace("$$", "$")  # `config` keeps compose's escape; the container gets `$`
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "chown")
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
           "ABSERVE_UID": "1234", "ABSERVE_GID": "5678"}
    result = subprocess.run(["sh", "-c", script.replace("/hf-cache", str(cache))], env=env,
                            capture_output=True, text=True, timeout=30, check=False)
    return result.returncode, result.stdout + result.stderr, calls(log)


@pytest.mark.skipif(os.geteuid() != 0, reason="the folder Docker makes is root's: needs root")
@pytest.mark.process
def test_a_cache_folder_docker_made_for_root_is_handed_to_the_host_user(tmp_path: Path) -> None:
    for cache in (tmp_path / "made-by-docker", tmp_path / "missing"):
        if cache.name == "made-by-docker":
            cache.mkdir()
        rc, out, made = _fresh(tmp_path, cache)
        assert rc == 0, out
        assert cache.is_dir()
        assert made == [["chown", "1234:5678", str(cache)]], "the top folder only, not recursive"


def _fresh(tmp_path: Path, cache: Path) -> tuple[int, str, list[list[str]]]:
    work = tmp_path / f"run-{cache.name}"
    work.mkdir()
    return run_init(work, cache)


@pytest.mark.process
def test_a_cache_with_contents_or_an_owner_is_left_as_it_is(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "hub").mkdir(parents=True)
    rc, out, made = _fresh(tmp_path, cache)
    assert rc == 0, out
    assert made == []
    assert "kept as it is" in out


@pytest.mark.process
def test_plain_up_needs_no_folder_made_beforehand() -> None:
    # The GPU host's path without signoff.sh: the only compose file names hf-cache-init, and
    # every service that mounts the cache starts after it (model-fetch, then the arms).
    services = resolved(None)["services"]
    fetch_deps = services["model-fetch"]["depends_on"]
    assert "hf-cache-init" in fetch_deps
    for name in ("vllm-a", "vllm-b", "vllm-a2"):
        deps = services[name]["depends_on"]
        assert "model-fetch" in deps or "vllm-a" in deps or "vllm-b" in deps, name


# ---- 6. the proxy's CA certificates reach every build --------------------------------------


def with_shell_env(extra: dict[str, str]) -> dict[str, Any]:
    """The services resolved from .env.example with ``extra`` in the shell's environment (a
    certificate spans lines: it comes from the shell, as docs/gpu.md says, not an env file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
    env |= {"HOME": "/nonexistent-home", **extra}
    cmd = [str(compose_binary()), "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE),
           "--env-file", str(ENV_EXAMPLE), "config", "--format", "json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout)["services"])


@pytest.mark.process
def test_every_service_that_builds_an_image_gets_the_ca_certificates() -> None:
    services = with_shell_env({"ABSERVE_EXTRA_CA_CERTS": PEM})
    builders = {name: s["build"] for name, s in services.items() if "build" in s}
    assert {"vllm-a", "vllm-b", "vllm-a2", "model-fetch", "prepare", "orchestrator"} <= set(builders)
    for name, build in builders.items():
        assert build["args"]["EXTRA_CA_CERTS"] == PEM, name
    # Unset, the argument is empty (the Dockerfiles then add nothing).
    for name, service in resolved(CONFIG_3B)["services"].items():
        if "build" in service:
            assert service["build"]["args"]["EXTRA_CA_CERTS"] == "", name
    assert run_compose("config", "--quiet", env_files=[ENV_EXAMPLE]).returncode == 0


@pytest.mark.parametrize("dockerfile", ["vllm.Dockerfile", "vllm-cpu.Dockerfile", "abserve.Dockerfile"])
def test_each_dockerfile_uses_the_certificates_for_pip_and_removes_them(dockerfile: str) -> None:
    text = (ROOT / "docker" / dockerfile).read_text()
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    after_from = code[next(i for i, ln in enumerate(code) if ln.startswith("FROM")):]
    assert 'ARG EXTRA_CA_CERTS=""' in after_from, "declared after FROM, where RUN sees it"
    runs = re.split(r"\n(?=[A-Z]+ )", "\n".join(code))
    # Every pip install that can reach an index (an offline --no-build-isolation --no-deps
    # install of abserve's own code needs no certificate).
    online = [r for r in runs if r.startswith("RUN") and "pip install" in r
              and not ("--no-build-isolation" in r and "--no-deps" in r)]
    assert online, dockerfile
    for run in online:
        assert "export PIP_CERT=/tmp/build-ca.pem" in run, run
        assert "rm -f /tmp/build-ca.pem" in run, run
        assert run.index("PIP_CERT") < run.index("pip install") < run.index("rm -f /tmp/build-ca.pem")
