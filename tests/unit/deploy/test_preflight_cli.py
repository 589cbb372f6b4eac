"""``abserve check CONFIG --gpu`` and ``scripts/signoff.sh``'s preflight, with fake probes on PATH.

The GPU probes are faked the sanctioned way: small ``nvidia-smi`` and ``docker`` scripts on a
PATH that holds nothing else, answering only the exact query the preflight must send. The
sign-off script runs for real under bash with a recording ``docker`` (and a recording or the
real ``abserve``), so the order "preflight, then any image build" is checked as executed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from abserve.cli import app

ROOT = Path(__file__).resolve().parents[3]
RELEASE = ROOT / "configs" / "gpu-release.yaml"
CONFIG_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"
H100 = "0, NVIDIA H100 80GB HBM3, 81559, 9.0, 580.95.05"
RUNTIMES = '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'
ENV = "ABSERVE_GPU_A=0\nABSERVE_GPU_B=0\nABSERVE_GPU_A2=0\nABSERVE_GPU_MEMORY_UTILIZATION=0.28\n"
PLACEMENT_VARS = ("ABSERVE_GPU_A", "ABSERVE_GPU_B", "ABSERVE_GPU_A2", "ABSERVE_GPU_MEMORY_UTILIZATION")


def script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def fake_host(bin_dir: Path, gpus: str | None = H100, smi_rc: int = 0,
              runtimes: str | None = RUNTIMES) -> None:
    """nvidia-smi answering only the preflight's query; docker answering only `info` (None: absent)."""
    bin_dir.mkdir(exist_ok=True)
    if gpus is not None:
        script(bin_dir / "nvidia-smi",
               '[ "$*" = "--query-gpu=index,name,memory.total,compute_cap,driver_version '
               '--format=csv,noheader,nounits" ] || exit 2\n'
               f"printf '%s\\n' '{gpus}'\nexit {smi_rc}\n")
    if runtimes is not None:
        script(bin_dir / "docker", '[ "$1" = info ] || exit 0\n'
               '[ "$*" = "info --format {{json .Runtimes}}" ] || exit 2\n'
               f"printf '%s\\n' '{runtimes}'\n")


def check(tmp_path: Path, *args: str, env_text: str = ENV, **env: str) -> tuple[int, str, str]:
    env_file = tmp_path / "gpu.env"
    env_file.write_text(env_text)
    clean: dict[str, str | None] = dict.fromkeys(PLACEMENT_VARS)
    result = CliRunner().invoke(app, ["check", *args, "--env-file", str(env_file)],
                                env={**clean, "PATH": str(tmp_path / "bin"), **env})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.process
def test_the_ok_path_prints_each_placement_and_ok(tmp_path: Path) -> None:
    fake_host(tmp_path / "bin")
    code, out, err = check(tmp_path, str(RELEASE), "--gpu")
    assert code == 0, err
    assert out.splitlines() == [
        "NVIDIA driver 580.95.05 (CUDA 13 needs 580.65.06 or newer)",
        "GPU 0 (NVIDIA H100 80GB HBM3, 80 GiB, compute capability 9.0): three arms (a, b, a2) at "
        "0.28 each, 84% of it, 22.3 GiB per arm (about 11.1 needed)",
        "model Qwen/Qwen2.5-VL-3B-Instruct: revision 66285546d2b821cf421d4f5eb2576359d3770cd3 (pinned)",
        "gpu preflight: ok"]


@pytest.mark.parametrize(
    ("host", "env_text", "message"),
    [
        ({"gpus": None}, ENV, "no NVIDIA runtime: nvidia-smi is not on PATH"),
        ({"gpus": "NVIDIA-SMI has failed", "smi_rc": 9}, ENV,
         "nvidia-smi failed (exit 9): NVIDIA-SMI has failed"),
        ({"runtimes": None}, ENV, "docker is not on PATH"),
        ({"runtimes": '{"runc":{"path":"runc"}}'}, ENV,
         "no NVIDIA runtime in Docker: docker info lists runc"),
        ({}, ENV.replace("ABSERVE_GPU_B=0", "ABSERVE_GPU_B=1"),
         "arm b is placed on GPU 1 (ABSERVE_GPU_B=1), this host has 1 GPU (0)"),
        ({}, ENV.replace("0.28", "0.4"), "three arms (a, b, a2) at 0.4 of GPU 0 need 120% of its 80 GiB"),
        ({"gpus": "0, NVIDIA A10, 23028, 8.6, 580.95.05"}, ENV,
         "three arms (a, b, a2) at 0.28 of GPU 0 need 84% of a 40 GiB GPU (11.1 GiB each"),
        ({"gpus": "0, Quadro RTX 8000, 49152, 7.5, 580.95.05"}, ENV,
         "VLLM_BATCH_INVARIANT=1 (server.env) needs "
         "compute capability 8.0 or newer; GPU 0 (Quadro RTX 8000, 48 GiB), three arms (a, b, a2), has 7.5"),
        ({"gpus": H100.replace("580.95.05", "575.57.08")}, ENV,
         "NVIDIA driver 575.57.08 is older than 580.65.06, the minimum of CUDA 13"),
    ],
)
@pytest.mark.process
def test_each_refusal_is_one_line_on_stderr_and_exit_4(
    tmp_path: Path, host: dict[str, Any], env_text: str, message: str
) -> None:
    fake_host(tmp_path / "bin", **host)
    code, out, err = check(tmp_path, str(RELEASE), "--gpu", env_text=env_text)
    assert code == 4
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("gpu preflight refused: ")
    assert message in err


@pytest.mark.process
def test_the_shells_environment_wins_over_the_env_file(tmp_path: Path) -> None:
    fake_host(tmp_path / "bin")
    code, _, err = check(tmp_path, str(RELEASE), "--gpu", ABSERVE_GPU_A2="3")
    assert code == 4
    assert "arm a2 is placed on GPU 3 (ABSERVE_GPU_A2=3)" in err


@pytest.mark.process
def test_without_env_file_dot_env_is_read_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path / "bin")
    monkeypatch.chdir(tmp_path)
    run = CliRunner()
    env: dict[str, str | None] = {**dict.fromkeys(PLACEMENT_VARS), "PATH": str(tmp_path / "bin")}
    assert run.invoke(app, ["check", str(RELEASE), "--gpu"], env=env).exit_code == 0  # compose defaults
    (tmp_path / ".env").write_text("ABSERVE_GPU_B=7\n")
    result = run.invoke(app, ["check", str(RELEASE), "--gpu"], env=env)
    assert result.exit_code == 4
    assert "GPU 7 (ABSERVE_GPU_B=7)" in result.stderr
    missing = run.invoke(app, ["check", str(RELEASE), "--gpu", "--env-file", "nope.env"], env=env)
    assert missing.exit_code == 4
    assert "no env file nope.env" in missing.stderr


@pytest.mark.process
def test_an_unpinned_release_is_refused_unless_allowed(tmp_path: Path) -> None:
    fake_host(tmp_path / "bin")
    config = tmp_path / "release-main.yaml"
    config.write_text(f"extends: {RELEASE}\nmodel: {{revision: main}}\n")
    code, _, err = check(tmp_path, str(config), "--gpu")
    assert code == 4
    assert "model.revision is 'main', not a commit: a release sign-off must pin" in err
    code, out, err = check(tmp_path, str(config), "--gpu", "--allow-unpinned")
    assert code == 0, err
    assert "revision main, not pinned (allowed by --allow-unpinned)" in out
    assert out.endswith("gpu preflight: ok\n")


def test_gpu_options_without_gpu_are_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", str(CONFIG_3B), "--allow-unpinned"])
    assert result.exit_code == 4
    assert "apply with --gpu only" in result.stderr


# ---- scripts/signoff.sh runs the preflight before any image build -------------------------------


def signoff(tmp_path: Path, abserve: str | None, **env: str) -> tuple[int, str, list[str]]:
    """signoff.sh in a copy of the tree; docker records its calls and has no compose (so the run
    stops right after the preflight); ``abserve``: a recording fake's body, or None for none."""
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "configs").mkdir()
    shutil.copy(ROOT / "scripts" / "signoff.sh", tree / "scripts" / "signoff.sh")
    shutil.copy(RELEASE, tree / "configs" / "gpu-release.yaml")
    (tree / ".env").write_text(ENV)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    script(bin_dir / "docker", f'echo "docker $*" >> "{log}"\n'
           '[ "$1" = info ] && printf \'%s\\n\' \'{"nvidia":{}}\' && exit 0\nexit 1\n')
    if abserve is not None:
        script(bin_dir / "abserve", f'echo "abserve $*" >> "{log}"\n{abserve}\n')
    result = subprocess.run(["bash", "scripts/signoff.sh", "configs/gpu-release.yaml"], cwd=tree,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **env},
                            capture_output=True, text=True, timeout=60, check=False)
    made = log.read_text().splitlines() if log.exists() else []
    return result.returncode, result.stderr + result.stdout, made


@pytest.mark.process
def test_signoff_stops_with_the_preflights_refusal_before_docker(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, "echo 'gpu preflight refused: no NVIDIA runtime' >&2; exit 4")
    assert rc == 4, out
    assert made == ["abserve check configs/gpu-release.yaml --gpu --env-file .env"]
    assert "gpu preflight refused: no NVIDIA runtime" in out


@pytest.mark.process
def test_signoff_goes_on_after_a_passing_preflight(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, "echo 'gpu preflight: ok'", ABSERVE_ALLOW_UNPINNED="1")
    assert made[0] == "abserve check configs/gpu-release.yaml --gpu --env-file .env --allow-unpinned"
    assert made[1:] == ["docker compose version"]  # the next step (here it fails: refused, rc 4)
    assert rc == 4
    assert "gpu preflight: ok" in out


@pytest.mark.parametrize("skip", [{"ABSERVE_SKIP_PREFLIGHT": "1"},
                                  {"COMPOSE_FILE": "docker-compose.yml:docker-compose.cpu.yml"}])
@pytest.mark.process
def test_signoff_skips_the_preflight_when_told_or_under_the_cpu_override(
    tmp_path: Path, skip: dict[str, str]
) -> None:
    rc, out, made = signoff(tmp_path, "exit 4", **skip)
    assert "GPU preflight skipped" in out
    assert made == ["docker compose version"]  # no preflight called; the next step refuses
    assert rc == 4
    assert "docker compose (v2) is required" in out


@pytest.mark.process
def test_signoff_without_abserve_says_how_to_install_it(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, None)
    assert rc == 4
    assert made == []
    assert "signoff: abserve is not installed for the GPU preflight: pipx install '.[service]' " \
           "(or set ABSERVE_SKIP_PREFLIGHT=1)" in out


@pytest.mark.process
def test_signoff_runs_the_checkouts_abserve_for_real(tmp_path: Path) -> None:
    # No abserve on PATH: the checkout's .venv/bin/abserve (here the project's own) runs the real
    # preflight against a fake host whose GPU is too old for batch invariance.
    venv_bin = tmp_path / "repo" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "abserve").symlink_to(ROOT / ".venv" / "bin" / "abserve")
    fake_host(tmp_path / "bin", gpus="0, Quadro RTX 8000, 49152, 7.5, 580.95.05", runtimes=None)
    rc, out, made = signoff(tmp_path, None)
    assert rc == 4, out
    assert "gpu preflight refused: VLLM_BATCH_INVARIANT=1 (server.env) needs compute capability 8.0" in out
    assert made == ["docker info --format {{json .Runtimes}}"]

