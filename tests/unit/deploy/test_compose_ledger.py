"""The host's one ledger in the compose files (issue 57), as real Docker Compose resolves them
(``config``, no engine; the binary and schema of ``test_compose``): the profile ``ledger``'s
PostgreSQL service ``ledger-db`` (on the internal backend network, no published port, its data
in the named volume ``ledger-db``, the orchestrator waiting for it when it runs, absent
otherwise), its CPU override (the host's PostgreSQL from the runtime image, same volume), and
``docker/compose.ledger-network.yml``, the setting that lets the orchestrator reach a
PostgreSQL outside the stack while the arms stay on the internal network alone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.deploy.test_compose import COMPOSE_FILE, ENV_EXAMPLE, compose_binary, schema_validator

ROOT = Path(__file__).resolve().parents[3]
CPU = ROOT / "docker-compose.cpu.yml"
NETWORK = ROOT / "docker/compose.ledger-network.yml"
ARMS = ("vllm-a", "vllm-b", "vllm-a2")


def resolved(*files: Path, profiles: str = "ledger", **env: str) -> dict[str, Any]:
    """The compose model of ``files`` with .env.example, the given profiles and variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
    clean |= {"HOME": "/nonexistent-home", "ABSERVE_HOST_PYTHON": "/opt/python3.11",
              "ABSERVE_HOST_PROJECT": str(ROOT), "COMPOSE_PROFILES": profiles, **env}
    cmd = [str(compose_binary()), "--project-directory", str(ROOT),
           *(a for f in files for a in ("-f", str(f))), "--env-file", str(ENV_EXAMPLE),
           "config", "--format", "json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean, check=False)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_the_ledger_service_is_valid_against_the_compose_schema() -> None:
    for path in (COMPOSE_FILE, NETWORK):
        errors = list(schema_validator().iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, f"{path.name}: " + "; ".join(e.message for e in errors)


@pytest.mark.process
def test_the_ledger_profile_is_a_postgres_on_the_internal_network_with_a_named_volume() -> None:
    model = resolved(COMPOSE_FILE, ABSERVE_LEDGER_PASSWORD="pw")
    db = model["services"]["ledger-db"]
    assert db["image"] == "postgres:17"
    assert db["profiles"] == ["ledger"]
    assert set(db["networks"]) == {"backend"}
    assert model["networks"]["backend"]["internal"] is True
    assert "ports" not in db  # nothing published: reached from the stack's containers only
    (data,) = db["volumes"]
    assert (data["type"], data["source"]) == ("volume", "ledger-db")
    assert data["target"] == "/var/lib/postgresql/data"
    assert "ledger-db" in model["volumes"]
    assert db["environment"] == {"POSTGRES_USER": "abserve", "POSTGRES_DB": "abserve",
                                 "POSTGRES_PASSWORD": "pw"}
    assert "127.0.0.1" in db["healthcheck"]["test"]  # ready over TCP, not during its initialisation
    waits = model["services"]["orchestrator"]["depends_on"]["ledger-db"]
    assert waits["condition"] == "service_healthy"
    assert waits["required"] is False


@pytest.mark.process
def test_without_the_profile_there_is_no_ledger_service() -> None:
    model = resolved(COMPOSE_FILE, profiles="")
    assert "ledger-db" not in model["services"]
    assert model["services"]["orchestrator"]["depends_on"]["ledger-db"]["required"] is False  # skipped


@pytest.mark.process
def test_the_cpu_override_runs_the_hosts_postgres_in_the_same_volume() -> None:
    db = resolved(COMPOSE_FILE, CPU, ABSERVE_LEDGER_PASSWORD="pw")["services"]["ledger-db"]
    assert db["image"] == "abserve/host-runtime:local"
    assert db["entrypoint"] == ["/app/docker/postgres-check.sh"]
    assert db["environment"]["ABSERVE_PG_PASSWORD"] == "pw"
    assert db["environment"]["ABSERVE_PG_DATA"] == "/var/lib/postgresql/data"
    assert {(v["source"], v["target"]) for v in db["volumes"] if v["type"] == "volume"} == {
        ("ledger-db", "/var/lib/postgresql/data")}
    assert db["healthcheck"]["test"] == ["CMD", "test", "-e", "/tmp/ready"]
    assert set(db["networks"]) == {"backend"}


@pytest.mark.process
def test_an_outside_postgres_is_reached_by_the_orchestrator_alone() -> None:
    model = resolved(COMPOSE_FILE, NETWORK, profiles="noise-floor", ABSERVE_LEDGER_NETWORK="team-ledger")
    services = model["services"]
    assert set(services["orchestrator"]["networks"]) == {"backend", "ledger"}
    ledger = model["networks"]["ledger"]
    assert (ledger["name"], ledger["external"]) == ("team-ledger", True)
    for arm in ARMS:  # the arms stay on the internal network: no route out
        assert set(services[arm]["networks"]) == {"backend"}, arm


@pytest.mark.process
def test_the_outside_network_must_be_named() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
    cmd = [str(compose_binary()), "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE),
           "-f", str(NETWORK), "--env-file", str(ENV_EXAMPLE), "config", "--quiet"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean, check=False)
    assert result.returncode != 0
    assert "set ABSERVE_LEDGER_NETWORK" in result.stderr
