"""The bare wheel (no extras) judges saved runs and stored runs in a venv of its own.

``pip install abserve`` must give a working CLI for everything that needs no server. The wheel
is built from a copy of the sources and installed into a fresh venv outside the checkout by pip,
which resolves the wheel's own ``dependencies`` (and nothing else) the usual way: through this
machine's pip settings, held to the versions this environment runs (the lock's) so that pip can
use its cache. A base dependency missing from pyproject.toml is then missing from the venv, and
the commands below crash (exit 5) instead of judging. Commands of an extra (router, load, a
managed arm's model) say which extra in one line and exit 4.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, run_info
from tests.support.wheel_build import ROOT, build_wheel

from abserve.base import exit_codes
from abserve.store import Store

pytestmark = pytest.mark.timeout(1800)  # the module's venv is built in the first test's time
SAVED = ROOT / "tests" / "fixtures" / "saved"
NOT_BASE = ("fastapi", "uvicorn", "locust", "psycopg", "vllm", "torch", "transformers")


def _pins(path: Path) -> Path:
    """This environment's versions as pip constraints (the editable abserve left out), read from
    its own site-packages: other tests put more folders on ``sys.path`` (an arm's venv, a built
    wheel), whose distributions must not pin a second version of a package."""
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    lines = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions(path=site)
                    if d.metadata["Name"] and d.metadata["Name"].lower() != "abserve"})
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("bare")
    wheel = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
               "-c", str(_pins(work / "pins.txt")), str(wheel)]
    for attempt in range(3):  # the registry can be out of reach for a moment (a daemon starting beside)
        done = subprocess.run(install, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode == 0:
            break
        time.sleep(30 * (attempt + 1))
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def abserve(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{venv / 'bin'}:{env.get('PATH', '')}", "COLUMNS": "200",
            "XDG_STATE_HOME": str(cwd / "state")}
    return subprocess.run([str(venv / "bin" / "abserve"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def judged(done: subprocess.CompletedProcess[str]) -> bool:
    return exit_codes.is_verdict(done.returncode) and done.returncode != exit_codes.INVALID


def test_the_venv_has_the_base_install_only(venv: Path, tmp_path: Path) -> None:
    python = str(venv / "bin" / "python")
    probe = f"import importlib.util as u; print([m for m in {NOT_BASE!r} if u.find_spec(m)])"
    found = subprocess.run([python, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                           check=True)
    assert found.stdout.strip() == "[]"
    module = subprocess.run([python, "-I", "-c", "import abserve; print(abserve.__file__)"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout.strip()
    assert Path(module).is_relative_to(venv)
    checked = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(("tool", "baseline", "candidate"), [
    ("vllm-bench", "vllm-bench-base-1.json", "vllm-bench-base-2.json"),
    ("aiperf", "aiperf/run1", "aiperf/run2"),
    ("guidellm", "guidellm/run1.json", "guidellm/run2.json"),
])
def test_compare_judges_saved_runs(venv: Path, tmp_path: Path, tool: str, baseline: str,
                                   candidate: str) -> None:
    done = abserve(venv, tmp_path, "compare", "--baseline", str(SAVED / baseline),
                   "--candidate", str(SAVED / candidate), "--out", "out")
    assert judged(done), done.stdout + done.stderr
    assert done.stdout.startswith(("PASS", "FAIL", "INCONCLUSIVE", "MARGINAL")), done.stdout
    for name in ("report.html", "report.json", "report.md", "junit.xml", "glossary.html"):
        assert (tmp_path / "out" / name).is_file(), (tool, name)


def _store(folder: Path) -> str:
    url = f"sqlite:///{folder / 'abserve.db'}"
    with Store.open(url) as store:
        store.create_run(run_info(run_id="r1", status="running"))
        store.write_exchanges([ex.model_copy(update={"run_id": "r1"}) for ex in ab_run(70, seed=1)])
        store.finish_run("r1", "completed")
    return url


def test_report_plan_ledger_and_accept_on_a_stored_run(venv: Path, tmp_path: Path) -> None:
    url = _store(tmp_path)
    report = abserve(venv, tmp_path, "report", "r1", "--db", url, "--out", "rep", "--policy", "cpu-default")
    assert judged(report), report.stdout + report.stderr
    assert (tmp_path / "rep" / "report.html").is_file()
    plan = abserve(venv, tmp_path, "plan", "r1", "--db", url, "--policy", "cpu-default",
                   "--effect-relative", "0.05")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    ledger = abserve(venv, tmp_path, "ledger", "--out", "site", "--db", url)
    assert ledger.returncode == 0, ledger.stdout + ledger.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    accept = abserve(venv, tmp_path, "accept", "r1", "--as", "v1", "--db", url)
    assert accept.returncode == exit_codes.USAGE, accept.stdout + accept.stderr  # no sign-off passed
    assert "internal error" not in accept.stderr


def test_check_runs_the_gpu_preflight_and_names_the_cpu_extra(venv: Path, tmp_path: Path) -> None:
    gpu = abserve(venv, tmp_path, "check", "--gpu", "gpu-release")
    assert gpu.returncode in (exit_codes.PASS, exit_codes.USAGE), gpu.stdout + gpu.stderr
    assert "preflight" in gpu.stdout + gpu.stderr
    assert "internal error" not in gpu.stderr
    assert "needs the" not in gpu.stderr
    managed = abserve(venv, tmp_path, "check", "cpu-default")  # builds the tiny model: vLLM's libraries
    assert managed.returncode == exit_codes.USAGE, managed.stdout + managed.stderr
    assert managed.stderr.strip().splitlines()[-1] == (
        "`abserve check` needs the cpu extra: pip install 'abserve[cpu]'")


def test_router_and_load_name_the_service_extra(venv: Path, tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text("arms: {a: {url: 'http://127.0.0.1:9', role: baseline}, "
                      "b: {url: 'http://127.0.0.1:9', role: candidate}}\n"
                      f"primary: a\ndev_mode: true\nrun_dir: {tmp_path / 'run'}\nrun_id: bare\n"
                      "host: 127.0.0.1\nport: 9\n")
    router = abserve(venv, tmp_path, "router", "--config", str(config))
    assert (router.returncode, router.stderr.strip()) == (
        exit_codes.USAGE, "`abserve router` needs the service extra: pip install 'abserve[service]'")
    load = abserve(venv, tmp_path, "load", "--host", "http://127.0.0.1:9", "--requests", "1",
                   "--profile", "many-items", "--out", str(tmp_path / "load"))
    assert (load.returncode, load.stderr.strip()) == (
        exit_codes.USAGE, "`abserve load` needs the service extra: pip install 'abserve[service]'")
