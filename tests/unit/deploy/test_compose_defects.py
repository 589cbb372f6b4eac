"""The defects a desk review of the compose stack found (issue 13), each pinned by a test.

Each test failed before its fix. The scripts run for real under sh/bash with the programs
they start (docker, locust, abserve) replaced by the recording fakes of
``test_compose_scripts``; the compose model is resolved by real Docker Compose. The whole
stack runs for real in ``tests/compose_stack`` (``make compose-check``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tests.unit.deploy.test_compose import ARM_SERVICES, resolved
from tests.unit.deploy.test_compose_scripts import calls, fake

from abserve.deploy.compose_env import compose_env, load_experiment
from abserve.telemetry import ProcessTelemetry, TelemetryWriter, read_telemetry

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
    (tree / "configs" / "x.yaml").write_text("name: x\npolicy: configs/policy/gpu.yaml\n")
    (tree / ".env").write_text(f"ABSERVE_RUNS_DIR={tmp_path / 'runs'}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "docker", REPORT_EXITS_2)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log)}
    result = subprocess.run(["bash", str(tree / "scripts" / "gpu-rotation.sh"), "configs/x.yaml", "2"],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    runs = [c for c in calls(log) if c[:2] == ["docker", "compose"] and "run" in c]
    assert [c[c.index("--entrypoint") + 3] for c in runs] == ["combine", "report"]
    assert {c[c.index("--entrypoint") + 2] for c in runs} == {"report"}  # the report service
    for call in runs:
        assert call[call.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}", call


# ---- 2. run-load.sh: failed requests are data; deadlines; workers that end ------------------


@pytest.mark.process
def test_run_load_neither_stops_on_a_failed_request_nor_waits_forever(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "locust")
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
           "ABSERVE_LOAD_PLAN": "many-items:10 interleaved:10", "ABSERVE_LOAD_OUT": str(tmp_path / "load"),
           "ABSERVE_LOCUST_WORKERS": "1", "ABSERVE_TARGET": "http://router:8100", "ABSERVE_RUN_ID": "r",
           "ABSERVE_LOAD_DEADLINE_S": "900"}
    assert sh("run-load.sh", env, cwd=tmp_path).returncode == 0
    made = calls(log)
    assert len(made) == 2
    for argv in made:
        options = dict(itertools.pairwise(argv))
        assert options["--exit-code-on-error"] == "0"  # Locust's default, 1, ended the plan
        assert options["--run-time"] == "900s"
        assert options["--expect-workers-max-wait"] == "300"


@pytest.mark.process
def test_a_worker_comes_back_for_each_profile_and_ends_with_the_load(tmp_path: Path) -> None:
    done = tmp_path / "exit_code"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "count"
    fake(bin_dir, "locust", f"""
from pathlib import Path
n = len(Path({str(count)!r}).read_text()) if Path({str(count)!r}).exists() else 0
Path({str(count)!r}).write_text("x" * (n + 1))
if n + 1 >= 3:
    Path({str(done)!r}).write_text("0")
""")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "calls.jsonl"),
           "ABSERVE_LOAD_DONE": str(done)}
    started = time.monotonic()
    result = sh("run-worker.sh", env)
    assert result.returncode == 0, result.stderr
    assert len(calls(tmp_path / "calls.jsonl")) == 3
    assert time.monotonic() - started < 30
    services = resolved(CONFIG_3B)["services"]
    assert services["locust-worker"].get("restart", "no") == "no"  # `up` can return


# ---- 3. the arms serve the revision model-fetch fetched; it is recorded ---------------------


def test_every_arm_starts_at_the_configs_revision(tmp_path: Path) -> None:
    experiment = load_experiment(ROOT / "configs" / CONFIG_3B)
    revision = experiment.model.revision
    for name, service in resolved(CONFIG_3B)["services"].items():
        if name not in ARM_SERVICES.values():
            continue
        command = service["command"]
        assert command[command.index("--revision") + 1] == revision, name
        assert command[command.index("--tokenizer-revision") + 1] == revision, name
    report = resolved(CONFIG_3B)["services"]["report"]["environment"]
    assert report["ABSERVE_MODEL_REVISION"] == revision


# ---- 4. the arms laid out and proven are the config's --------------------------------------


@pytest.mark.process
def test_without_the_floor_no_a2_is_laid_out_or_expected(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "configs" / CONFIG_3B).read_text())
    del raw["arms"]["a2"], raw["router"]["arms"]["a2"]
    path = tmp_path / "two-arms.yaml"
    path.write_text(yaml.safe_dump(raw))
    arms = compose_env(load_experiment(path), "configs/two-arms.yaml")["ABSERVE_ARMS"]
    assert arms == "a b"
    env = {"PATH": os.environ["PATH"], "ABSERVE_RUNS_ROOT": str(tmp_path / "runs"),
           "ABSERVE_REPORTS_ROOT": str(tmp_path / "reports"), "ABSERVE_RUN_ID": "r1",
           "ABSERVE_UID": str(os.getuid()), "ABSERVE_GID": str(os.getgid()), "ABSERVE_ARMS": arms}
    result = sh("prepare-run.sh", env)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "runs" / "r1" / "telemetry").iterdir()) == ["a", "b"]


# ---- 5. the report proves into the store it judges ------------------------------------------


def run_report(tmp_path: Path, prove_rc: int = 0) -> tuple[int, str, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "abserve", f"import sys; sys.exit({prove_rc} if sys.argv[1] == 'prove' else 2)")
    fake(bin_dir, "python")
    (tmp_path / "telemetry" / "a2").mkdir(parents=True)  # an a2 left over: not the config's
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
           "ABSERVE_TELEMETRY_ROOT": str(tmp_path / "telemetry"), "ABSERVE_ARMS": "a b"}
    pg = "postgresql+psycopg://abserve:pw@postgres:5432/abserve"
    result = sh("run-report.sh", env, "r1", "--db", pg, "--out", "/reports/r1", "--policy", "p.yaml")
    return result.returncode, result.stderr, calls(log)


@pytest.mark.process
def test_the_report_proves_into_its_own_store(tmp_path: Path) -> None:
    rc, err, made = run_report(tmp_path)
    assert rc == 2, err
    prove = next(c for c in made if c[:2] == ["abserve", "prove"])
    assert prove[prove.index("--db") + 1].startswith("postgresql+psycopg://")
    assert [a for a in prove if "=" in a and not a.startswith("postgresql")] == ["a=linear", "b=bisect"]
    services = resolved(CONFIG_3B)["services"]
    assert (services["report"]["environment"]["ABSERVE_DATABASE_URL"]
            == services["router"]["environment"]["ABSERVE_ROUTER_DATABASE_URL"])


@pytest.mark.process
def test_a_proof_that_cannot_be_recorded_is_an_error_not_a_fail(tmp_path: Path) -> None:
    rc, err, made = run_report(tmp_path, prove_rc=1)
    assert rc == 4
    assert "could not be recorded" in err
    assert not any(c[:2] == ["abserve", "report"] for c in made)


# ---- 6. smaller ones ------------------------------------------------------------------------


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
