"""The defects a desk review of the compose stack found (issue 13), each pinned by a test.

Each test failed before its fix. The scripts run for real under sh/bash with the programs
they start (docker) replaced by the recording fakes of ``test_compose_scripts``; the compose
model is resolved by real Docker Compose. The whole stack runs for real in
``tests/compose_stack`` (``make compose-check``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.unit.deploy.test_compose import ARM_SERVICES, resolved
from tests.unit.deploy.test_compose_scripts import calls, fake
from typer.main import get_command

from abserve.cli import app
from abserve.deploy.compose_env import compose_env, load_experiment
from abserve.model.telemetry import ProcessTelemetry, TelemetryWriter, read_telemetry

ROOT = Path(__file__).resolve().parents[3]
CONFIG_3B = "gpu-qwen2.5-vl-3b.yaml"


def sh(script: str, env: dict[str, str], *args: str,
       cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(ROOT / "docker" / script), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


# ---- 1. gpu-rotation.sh: combine and report as the host user ----------------------------


# `abserve report` (the command after `--entrypoint abserve report`) answers 2, the rest 0.
REPORT_EXITS_2 = """
a = sys.argv
i = a.index("--entrypoint") if "--entrypoint" in a else -1
sys.exit(2 if i >= 0 and a[i + 3] == "report" else 0)
"""


@pytest.mark.process
def test_rotation_combines_and_reports_as_the_host_user(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "configs").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu-rotation.sh", tree / "scripts")
    (tree / "scripts" / "signoff.sh").write_text("#!/bin/sh\nexit 2\n")
    (tree / "scripts" / "signoff.sh").chmod(0o755)
    shutil.copy(ROOT / "configs" / "gpu-own-change.yaml", tree / "configs" / "x.yaml")
    (tree / ".env").write_text(f"ABSERVE_RUNS_DIR={tmp_path / 'runs'}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "abserve").symlink_to(ROOT / ".venv" / "bin" / "abserve")  # `abserve rotate`
    fake(bin_dir, "docker", REPORT_EXITS_2)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log)}
    result = subprocess.run(["bash", str(tree / "scripts" / "gpu-rotation.sh"), "configs/x.yaml", "2"],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    runs = [c for c in calls(log) if c[:2] == ["docker", "compose"] and "run" in c]
    assert [c[c.index("--entrypoint") + 3] for c in runs] == ["combine", "report"]
    assert {c[c.index("--entrypoint") + 2] for c in runs} == {"orchestrator"}  # its image and mounts
    for call in runs:
        assert call[call.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}", call


# ---- 3. the arms serve the revision model-fetch fetched; it is recorded ---------------------


@pytest.mark.process
def test_every_arm_starts_at_the_configs_revision(tmp_path: Path) -> None:
    experiment = load_experiment(ROOT / "configs" / CONFIG_3B)
    revision = experiment.model.revision
    for name, service in resolved(CONFIG_3B)["services"].items():
        if name not in ARM_SERVICES.values():
            continue
        command = service["command"]
        assert command[command.index("--revision") + 1] == revision, name
        assert command[command.index("--tokenizer-revision") + 1] == revision, name


# ---- 4. the arms laid out and proven are the config's --------------------------------------


@pytest.mark.process
def test_without_the_floor_no_a2_is_laid_out_or_expected(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "configs" / CONFIG_3B).read_text())
    del raw["arms"]["a2"]  # router.arms is derived
    path = tmp_path / "two-arms.yaml"
    path.write_text(yaml.safe_dump(raw))
    arms = compose_env(load_experiment(path), "configs/two-arms.yaml")["ABSERVE_ARMS"]
    assert arms == "a b"
    env = {"PATH": os.environ["PATH"], "ABSERVE_RUNS_ROOT": str(tmp_path / "runs"), "ABSERVE_RUN_ID": "r1",
           "ABSERVE_UID": str(os.getuid()), "ABSERVE_GID": str(os.getgid()), "ABSERVE_ARMS": arms}
    result = sh("prepare-run.sh", env)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "runs" / "r1" / "telemetry").iterdir()) == ["a", "b"]


@pytest.mark.process
def test_prepare_never_overwrites_a_run_but_moves_a_plain_ups_earlier_run_aside(tmp_path: Path) -> None:
    runs = tmp_path / "runs"

    def prepare(run_id: str) -> subprocess.CompletedProcess[str]:
        return sh("prepare-run.sh", {"PATH": os.environ["PATH"], "ABSERVE_RUNS_ROOT": str(runs),
                                     "ABSERVE_RUN_ID": run_id, "ABSERVE_UID": str(os.getuid()),
                                     "ABSERVE_GID": str(os.getgid()), "ABSERVE_ARMS": "a b"})

    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "abserve.db").write_text("")
    refused = prepare("r1")
    assert refused.returncode == 1
    assert "already has a store" in refused.stderr
    (runs / "manual" / "telemetry" / "a").mkdir(parents=True)
    (runs / "manual" / "telemetry" / "a" / "old.json").write_text("{}")  # an earlier start's proof
    (runs / "manual" / "report.json").write_text("{}")
    moved = prepare("manual")
    assert moved.returncode == 0, moved.stderr
    (kept,) = [p for p in runs.iterdir() if p.name.startswith("manual-")]
    assert (kept / "report.json").is_file()
    assert sorted(p.name for p in (runs / "manual" / "telemetry").iterdir()) == ["a", "b"]
    assert not any((runs / "manual" / "telemetry" / "a").iterdir())


# ---- 5. the run's store is the orchestrator's, named without a password on a command line ------


@pytest.mark.process
def test_the_orchestrator_keeps_the_store_url_out_of_its_command_line() -> None:
    orchestrator = resolved(CONFIG_3B)["services"]["orchestrator"]
    assert "--db" not in orchestrator["command"]
    assert "ABSERVE_DATABASE_URL" in orchestrator["environment"]
    (db,) = [p for p in get_command(app).commands["run"].params if p.name == "db"]  # type: ignore[attr-defined]
    assert db.envvar == "ABSERVE_DATABASE_URL"  # what `abserve run --db` reads


# ---- 6. smaller ones ------------------------------------------------------------------------


@pytest.mark.process
def test_model_fetch_writes_the_cache_as_the_host_user_and_no_arm_is_given_a_cublas_setting() -> None:
    services = resolved(CONFIG_3B)["services"]
    assert services["model-fetch"]["user"] == "1000:1000"  # ABSERVE_UID:ABSERVE_GID of .env.example
    for name in ARM_SERVICES.values():
        if name in services:
            assert "CUBLAS_WORKSPACE_CONFIG" not in services[name]["environment"], name


def test_telemetry_records_the_settings_the_process_runs_with_at_each_flush(tmp_path: Path) -> None:
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    record = ProcessTelemetry(pid=1, process_name="VllmWorker-0", role="worker", mode="linear",
                              scope="runner", vllm_version=None, argv=["api_server", "--revision", "abc"])
    writer = TelemetryWriter(tmp_path, record)
    writer.flush()
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"  # as vLLM sets it after start on Hopper
    try:
        writer.flush()
    finally:
        del os.environ["CUBLAS_WORKSPACE_CONFIG"]
    (read,) = read_telemetry(tmp_path)
    assert read.environment["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert read.argv == ["api_server", "--revision", "abc"]
