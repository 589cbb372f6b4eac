"""The built wheel works outside the checkout: packaged configs by name, report, plan, router.

The wheel is built offline from a copy of the sources and installed into a fresh venv made from
this interpreter. The venv sees the dependencies already installed beside this test (a ``.pth``
file naming this environment's site-packages, whose own ``.pth`` files, the editable install's
included, are not processed there) but never the repository: ``abserve`` must come from the
venv. Every command runs from an empty folder outside the checkout.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import pytest
import yaml
from tests.support.records_factory import ab_run, run_info
from tests.support.wheel_build import build_wheel

from abserve.model.provenance import RunProvenance
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)
TORCH_HOOK = "zzz_abserve_torch_compat.pth"
# Where the installed package finds its module, configs, locustfile, a profile and a config's policy.
PROBE = """
import abserve
from abserve.config import load_experiment
from abserve.base.packaged import packaged_root
from abserve.traffic.profiles import resolve_profile_path
from abserve.traffic.runner import LOCUSTFILE
print(abserve.__file__, packaged_root(), LOCUSTFILE, resolve_profile_path("many-items"),
      load_experiment("cpu-default").policy)
"""


def _make_venv(venv: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]  # this environment's packages, not the repository
    (Path(site) / "_abserve_test_deps.pth").write_text(deps + "\n")
    hook = Path(deps) / TORCH_HOOK  # scripts/setup.sh's fix for torchvision beside CPU torch
    if hook.is_file():
        shutil.copy2(hook, Path(site) / TORCH_HOOK)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=120)
    return venv


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(base)
    return _make_venv(base / "venv", wheel)


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def _env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}", "COLUMNS": "200"}


def abserve(venv: Path, cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "abserve"), *args], cwd=cwd, env=_env(venv),
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_abserve_is_imported_from_the_venv_not_the_checkout(venv: Path, outside: Path) -> None:
    done = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=outside, env=_env(venv),
                          capture_output=True, text=True, check=True)
    module, root, locustfile, profile, policy = map(Path, done.stdout.split())
    assert module.is_relative_to(venv), module
    assert root.is_relative_to(venv)
    assert (root / "policy" / "gpu.yaml").is_file()
    assert locustfile.is_relative_to(venv)
    assert locustfile.is_file()
    assert profile == root / "traffic" / "many-items.yaml"
    assert policy == root / "policy" / "cpu-default.yaml"  # cpu-default.yaml names configs/policy/...
    version = abserve(venv, outside, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, "abserve 0.1.0")


def test_check_a_packaged_config_by_name(venv: Path, outside: Path) -> None:
    done = abserve(venv, outside, "check", "cpu-default")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "arm a: managed, baseline" in done.stdout
    assert "proves bisect" in done.stdout
    assert (outside / ".abserve" / "models" / "tiny-llava" / "config.json").is_file()  # built here
    refused = abserve(venv, outside, "check", "no-such-config")
    assert refused.returncode != 0
    assert "known: " in refused.stdout + refused.stderr


def _store(folder: Path, runs: dict[str, dict[str, object]]) -> str:
    url = f"sqlite:///{folder / 'abserve.db'}"
    with Store.open(url) as store:
        for run_id, provenance in runs.items():
            info = run_info(run_id=run_id, status="running")
            info.provenance = RunProvenance.model_validate({**info.provenance.model_dump(), **provenance})
            store.create_run(info)
            store.write_exchanges([ex.model_copy(update={"run_id": run_id}) for ex in ab_run(70, seed=1)])
            store.finish_run(run_id, "completed")
    return url


def test_plan_and_report_with_packaged_policies(venv: Path, outside: Path) -> None:
    digest = hashlib.sha256((ROOT / "configs/policy/cpu-default.yaml").read_bytes()).hexdigest()
    url = _store(outside, {"r1": {}, "r2": {"policy_sha256": digest}})
    plan = abserve(venv, outside, "plan", "r2", "--db", url, "--effect-relative", "0.05")
    assert plan.returncode == 0, plan.stdout + plan.stderr  # under the recorded policy, packaged
    assert "policy: cpu-default from " in plan.stdout
    report = abserve(venv, outside, "report", "r1", "--db", url, "--out", "out", "--policy", "gpu")
    assert report.returncode in (0, 1, 2), report.stdout + report.stderr
    assert "policy: gpu (--policy)" in report.stdout
    assert (outside / "out" / "report.html").is_file()
    assert (outside / "out" / "report.json").is_file()
    assert 'id="hl"' in (outside / "out" / "glossary.html").read_text()  # packaged docs/glossary.md
    found = abserve(venv, outside, "report", "r2", "--db", url, "--out", "out2")  # the recorded policy
    assert found.returncode in (0, 1, 2), found.stdout + found.stderr
    assert "policy: cpu-default from " in found.stdout
    assert "_configs/policy/cpu-default.yaml" in found.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_router_starts_and_answers(venv: Path, outside: Path) -> None:
    port = _free_port()
    config = outside / "router.yaml"
    config.write_text(yaml.safe_dump({
        "arms": {"a": {"url": "http://127.0.0.1:9", "role": "baseline"},
                 "b": {"url": "http://127.0.0.1:9", "role": "candidate"}},
        "primary": "a", "dev_mode": True, "run_dir": str(outside / "run"), "run_id": "wheel",
        "host": "127.0.0.1", "port": port}))
    proc = subprocess.Popen([str(venv / "bin" / "abserve"), "router", "--config", str(config)],
                            cwd=outside, env=_env(venv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        assert _live(port, proc), proc.stdout.read() if proc.stdout and proc.poll() is not None else ""
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def _live(port: int, proc: subprocess.Popen[str], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.2)
    return False


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
ARM_PROBE = """
import importlib.metadata as md, sys
import abserve.vllm_plugin
plugins = [e.value for e in md.entry_points(group="vllm.general_plugins") if e.name == "abserve"]
print(abserve.vllm_plugin.__file__, plugins[0])
"""


def test_an_arm_environment_gets_the_installed_abserve_with_its_plugin_entry_point(
        venv: Path, outside: Path) -> None:
    """An arm's own venv (``install:``) from a wheel install: the installed files are copied in
    (no checkout to install from, and no such release on PyPI), the vLLM plugin entry point too."""
    arm = outside / "arm-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(arm)], check=True, timeout=60)
    arm_python = arm / "bin" / "python"
    site = subprocess.run([str(arm_python), "-c", PURELIB], check=True, capture_output=True,
                          text=True).stdout.strip()
    copy = ("import sys; from pathlib import Path; from abserve.arms import arm_venv; "
            "assert arm_venv.abserve_source() is None; "
            "print(arm_venv.copy_installed_abserve(Path(sys.argv[1])))")
    copied = subprocess.run([str(venv / "bin" / "python"), "-c", copy, site], cwd=outside, env=_env(venv),
                            capture_output=True, text=True, timeout=60)
    assert copied.returncode == 0, copied.stderr
    assert int(copied.stdout) > 50
    probe = subprocess.run([str(arm_python), "-I", "-c", ARM_PROBE], cwd=outside,
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr  # stdlib only: the arm needs nothing else of abserve's
    module, entry = probe.stdout.split()
    assert Path(module).is_relative_to(arm)
    assert entry == "abserve.vllm_plugin:register"
