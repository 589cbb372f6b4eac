"""``examples/ci/github-gpu.yml``, the self-hosted GPU runner's workflow, checked as
``test_ci_examples`` checks the CPU ones: it parses, runs on pull requests, on main and nightly
on a runner labelled gpu, gates each job on ``scripts/signoff.sh``'s exit code, publishes the
report always, accepts a build on main only after its sign-off passed, every abserve command it
calls takes the options it passes, and the config each job writes is what compose runs: with a
ledger holding an accepted release (``test_compose_accepted``'s, made by the ledger code), arm a
is that release's recorded image and arm b the job's image."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.deploy.test_compose_accepted import RECORDED, compose_signoff, env_lines
from typer.testing import CliRunner

from abserve.cli import app
from abserve.deploy.compose_env import main as compose_env_main

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples/ci/github-gpu.yml"
JOBS = ("pull-request", "main", "nightly")


def workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def steps(job: str) -> list[dict[str, Any]]:
    return list(workflow()["jobs"][job]["steps"])


def step(job: str, contains: str) -> dict[str, Any]:
    return next(s for s in steps(job) if contains in s.get("run", ""))


def stack_abserve_calls(job: str) -> list[list[str]]:
    """Each ``abserve SUB ...`` the job runs in the stack's orchestrator container, as words."""
    found = []
    for s in steps(job):
        for line in s.get("run", "").splitlines():
            words = shlex.split(line)
            if "--entrypoint" in words and words[words.index("--entrypoint") + 1] == "abserve":
                found.append(words[words.index("orchestrator") + 1:])
    return found


def test_it_runs_on_pull_requests_main_and_nightly_on_a_gpu_runner() -> None:
    data = workflow()
    on: dict[str, Any] = data["on"] if "on" in data else data[True]  # YAML 1.1 reads `on` as true
    assert "pull_request" in on
    assert on["push"]["branches"] == ["main"]
    assert on["schedule"][0]["cron"]
    assert set(data["jobs"]) == set(JOBS)
    for job in JOBS:
        assert data["jobs"][job]["runs-on"] == ["self-hosted", "linux", "gpu"], job
    assert data["concurrency"]["cancel-in-progress"] is False  # one sign-off at a time on the GPUs


@pytest.mark.parametrize("job", JOBS)
def test_each_job_gates_on_signoffs_exit_code_and_publishes_the_report(job: str) -> None:
    signoff = step(job, "scripts/signoff.sh")
    assert signoff["run"].strip() == "scripts/signoff.sh configs/local/ci.yaml"
    assert not signoff.get("continue-on-error")
    assert "if" not in signoff  # runs whenever the job does: its exit code is the gate
    text = "\n".join(s.get("run", "") for s in steps(job))
    assert "|| true" not in text
    assert "make " not in text
    upload = next(s for s in steps(job) if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == "${{ env.RUN_DIR }}"
    assert workflow()["env"]["RUN_DIR"] == "runs/" + workflow()["env"]["ABSERVE_RUN_ID_OVERRIDE"]


def test_main_accepts_its_build_only_after_its_sign_off_passed() -> None:
    accept = step("main", " accept ")
    assert "if" not in accept  # the default, success(): only after the sign-off exited 0
    names = [s.get("name", "") for s in steps("main")]
    assert names.index(accept["name"]) > names.index(step("main", "scripts/signoff.sh")["name"])
    [call] = [c for c in stack_abserve_calls("main") if c[0] == "accept"]
    assert call[1] == "$ABSERVE_RUN_ID_OVERRIDE"  # the run signoff.sh just ran
    for job in ("pull-request", "nightly"):
        assert not [c for c in stack_abserve_calls(job) if c[0] == "accept"], job


def test_every_abserve_command_it_calls_takes_the_options_it_passes() -> None:
    calls = [c for job in JOBS for c in stack_abserve_calls(job)]
    assert {c[0] for c in calls} == {"accept", "ledger"}
    for sub, *args in calls:
        done = CliRunner().invoke(app, [sub, "--help"], env={"COLUMNS": "200"})
        assert done.exit_code == 0, done.output
        for option in (a for a in args if a.startswith("--")):
            assert option in done.output, f"abserve {sub} has no {option}"


def written_config(job: str, image: str) -> str:
    """The config the job's heredoc writes, its ``$IMAGE`` expanded as the shell would."""
    run = step(job, "configs/local/ci.yaml <<EOF")["run"]
    body = re.search(r"<<EOF\n(.*?)\nEOF", run, re.DOTALL)
    assert body, run
    return body.group(1).replace("$IMAGE", image) + "\n"


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.process
def test_the_config_each_job_writes_runs_its_image_against_the_accepted_release(
    job: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    compose_signoff(url, tmp_path, "signoff-1", RECORDED)
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "configs", checkout / "configs", ignore=shutil.ignore_patterns("local"))
    (checkout / "configs/local").mkdir()
    image = "ghcr.io/your-org/vllm:0123456789abcdef"
    (checkout / "configs/local/ci.yaml").write_text(written_config(job, image))
    monkeypatch.chdir(checkout)
    monkeypatch.delenv("ABSERVE_DATABASE_URL", raising=False)
    assert compose_env_main(["configs/local/ci.yaml", "--db", url]) == 0
    env = env_lines(capsys.readouterr().out)
    assert env["ABSERVE_VLLM_IMAGE_A"] == RECORDED
    assert env["ABSERVE_VLLM_IMAGE_B"] == image
    assert env["ABSERVE_ARMS"] == "a b"
