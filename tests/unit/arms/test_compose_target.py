"""The docker compose target of ``abserve run``: every arm is the stack's service ``vllm-<arm>``,
waited for on ``/health``, proven from the run's telemetry folder, and identified by what its
server ran when it has no lookup to prove (``abserve.arms.compose_target``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abserve.arms.compose_target import (
    ComposeServer,
    arm_images,
    arm_url,
    compose_servers,
    server_identity,
)
from abserve.arms.run_paths import LoadStopped, RunRefused
from abserve.arms.server import ServerStartError
from abserve.cli import app
from abserve.config import load_experiment
from abserve.model.telemetry import ProcessTelemetry, TelemetryWriter
from abserve.runs.provenance import arm_provenance

ROOT = Path(__file__).resolve().parents[3]
CPU_COMPOSE = ROOT / "configs" / "cpu-compose.yaml"


def servers_of(config_path: Path, tmp_path: Path) -> dict[str, ComposeServer]:
    return compose_servers(load_experiment(config_path), lambda arm: tmp_path / "telemetry" / arm,
                           lambda name: tmp_path / "logs" / f"{name}.log")


def test_every_arm_is_its_compose_service_with_its_lookup_and_the_runs_telemetry(tmp_path: Path) -> None:
    servers = servers_of(CPU_COMPOSE, tmp_path)
    assert {name: s.url for name, s in servers.items()} == {"a": "http://vllm-a:8000", "b": "http://vllm-b:8000"}
    assert {name: s.lookup_mode for name, s in servers.items()} == {"a": "linear", "b": "bisect"}
    assert servers["b"].telemetry_dir == tmp_path / "telemetry" / "b"
    assert all(s.tree() == [] and s.process is None for s in servers.values())  # compose's, not ours
    assert arm_url("hybrid") == "http://vllm-hybrid:8000"


def test_each_arms_image_comes_from_what_signoff_built(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    assert arm_images({"ABSERVE_ARM_IMAGES": "a=abserve/vllm-a:x@sha256:1 b=abserve/vllm-b:y"}) == {
        "a": "abserve/vllm-a:x@sha256:1", "b": "abserve/vllm-b:y"}
    assert arm_images({}) == {}
    monkeypatch.setenv("ABSERVE_ARM_IMAGES", "b=abserve/vllm-b:v1@sha256:beef")
    servers = servers_of(CPU_COMPOSE, tmp_path)
    assert (servers["a"].image, servers["b"].image) == (None, "abserve/vllm-b:v1@sha256:beef")


def test_an_endpoint_arm_is_refused_under_compose(tmp_path: Path) -> None:
    config = tmp_path / "x.yaml"
    config.write_text(CPU_COMPOSE.read_text().replace(
        "b: {lookup: bisect, role: candidate}", "b: {url: 'http://10.0.0.5:8000', role: candidate}"))
    with pytest.raises(RunRefused, match="url: endpoints"):
        servers_of(config, tmp_path)


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.server
def test_a_compose_arm_is_ready_once_its_health_answers(health_server: str, tmp_path: Path) -> None:
    arm = servers_of(CPU_COMPOSE, tmp_path)["a"]
    arm.external_url = health_server
    arm.start().wait_ready(timeout_s=10)
    assert arm.ready_after_s is not None


@pytest.mark.server
def test_an_arm_that_never_gets_healthy_names_its_service(tmp_path: Path) -> None:
    arm = servers_of(CPU_COMPOSE, tmp_path)["b"]
    arm.external_url = "http://127.0.0.1:9"  # nothing listens there
    with pytest.raises(ServerStartError, match=r"service vllm-b.*docker compose logs vllm-b"):
        arm.start().wait_ready(timeout_s=1.5)


def without_lookup_a() -> str:
    return CPU_COMPOSE.read_text().replace("a: {lookup: linear, role: baseline}", "a: {role: baseline}")


def record(role: str, argv: list[str], mode: str | None = None) -> ProcessTelemetry:
    return ProcessTelemetry(pid=hash(role) % 1000, process_name=role, role=role, mode=mode, scope="none",
                            vllm_version="0.33.0", argv=argv)


def test_an_arm_without_a_lookup_is_identified_by_what_its_server_ran(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # recorded by each process at every flush
    config = tmp_path / "x.yaml"
    config.write_text(without_lookup_a())
    arm = servers_of(config, tmp_path)["a"]
    arm.image = "abserve/vllm-a:v0.33.0@sha256:abc"
    assert arm.telemetry_dir is not None
    argv = ["serve", "Qwen/x", "--revision", "abc", "--max-num-seqs", "64"]
    arm.telemetry_dir.mkdir(parents=True)
    for rec in (record("api_server", argv), record("worker", [])):
        TelemetryWriter(arm.telemetry_dir, rec).flush()
    identity = server_identity(arm.telemetry())
    assert identity["server_args"] == argv[1:]
    assert identity["vllm_version"] == "0.33.0"
    assert identity["environment"]["VLLM_BATCH_INVARIANT"] == "1"
    prov = arm_provenance("a", arm, load_experiment(config).arms["a"])
    assert prov.identified
    assert prov.proof_state == "identified"
    assert prov.proven_lookup is None
    assert prov.server_args == argv[1:]
    assert prov.image == arm.image
    assert prov.kind == "image"
    assert prov.proof_detail == ("identified (no lookup to prove): vLLM 0.33.0, image "
                                 "abserve/vllm-a:v0.33.0@sha256:abc, 5 server args")


def test_an_arm_whose_server_said_nothing_stays_unproven(tmp_path: Path) -> None:
    config = tmp_path / "x.yaml"
    config.write_text(without_lookup_a())
    arm = servers_of(config, tmp_path)["a"]
    prov = arm_provenance("a", arm, load_experiment(config).arms["a"])
    assert not prov.identified
    assert prov.proof_state == "unproven"
    assert prov.proof_detail.startswith("unproven: no lookup to prove")


def test_image_arms_are_refused_outside_compose_in_one_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABSERVE_RUN_LOCK", str(tmp_path / "run.lock"))  # not the machine's lock
    release = ROOT / "configs" / "gpu-release.yaml"
    result = CliRunner().invoke(app, ["run", str(release), "--out", str(tmp_path)])
    assert result.exit_code == 4, result.output
    assert "are images, which docker compose runs" in result.output
    bad = CliRunner().invoke(app, ["run", str(CPU_COMPOSE), "--out", str(tmp_path), "--target", "k8s"])
    assert bad.exit_code == 4
    assert "--target 'k8s'" in bad.output


@pytest.mark.parametrize(("reason", "code"), [("error_rate", 6), ("worker_lost", 7), ("setup", 3), (None, 3)])
def test_a_stopped_load_exits_as_abserve_load_does(reason: str | None, code: int) -> None:
    assert LoadStopped("load x stopped", reason).exit_code == code
