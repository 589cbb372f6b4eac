"""``examples/ci/``: the GitHub Actions workflow and the GitLab CI file parse, run the CPU default
on a pull request and the nightly against the accepted release, gate on ``abserve run``'s exit
code (never ``make run``), publish the reports and the ledger, and every config they name
passes ``abserve check`` (the nightly's against a store holding an accepted release)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.accepted_store import accepted_store
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import load_policy
from abserve.config import load_experiment

ROOT = Path(__file__).resolve().parents[2]
GITHUB = ROOT / "examples/ci/github-actions.yml"
GITLAB = ROOT / "examples/ci/gitlab-ci.yml"


def github() -> dict[Any, Any]:
    return yaml.safe_load(GITHUB.read_text())


def gitlab() -> dict[str, Any]:
    return yaml.safe_load(GITLAB.read_text())


def github_steps(job: str) -> list[dict[str, Any]]:
    return list(github()["jobs"][job]["steps"])


def github_commands() -> dict[str, list[str]]:
    """Per job, its shell commands (each step's ``run``)."""
    return {name: [s["run"] for s in job["steps"] if "run" in s] for name, job in github()["jobs"].items()}


def gitlab_commands() -> dict[str, list[str]]:
    """Per job (templates merged in), its shell commands."""
    data = gitlab()
    out = {}
    for name, job in data.items():
        if not isinstance(job, dict) or name.startswith(".") or "script" not in job:
            continue
        merged = {**data.get(job.get("extends", ""), {}), **job}
        out[name] = [*merged.get("before_script", []), *merged["script"], *merged.get("after_script", [])]
    return out


def abserve_calls(commands: list[str], sub: str) -> list[list[str]]:
    """Each ``abserve SUB ...`` call of ``commands`` as its arguments after ``SUB``."""
    calls = []
    for command in commands:
        words = shlex.split(command, comments=True)
        for i, w in enumerate(words[:-1]):
            if w.endswith("abserve") and words[i + 1] == sub:
                calls.append(words[i + 2:])
    return calls


def configs_named() -> set[str]:
    every = [c for jobs in (github_commands(), gitlab_commands()) for cmds in jobs.values() for c in cmds]
    return {args[0] for sub in ("run", "check") for args in abserve_calls(every, sub)}


def test_github_runs_on_pull_requests_and_nightly() -> None:
    data = github()
    on: dict[str, Any] = data["on"] if "on" in data else data[True]  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in on
    assert on["schedule"][0]["cron"]
    assert set(data["jobs"]) == {"pull-request", "nightly"}


def test_gitlab_runs_on_merge_requests_and_schedules() -> None:
    rules = {name: gitlab()[name]["rules"][0]["if"] for name in gitlab_commands()}
    assert rules == {"abserve:merge-request": '$CI_PIPELINE_SOURCE == "merge_request_event"',
                     "abserve:nightly": '$CI_PIPELINE_SOURCE == "schedule"'}


@pytest.mark.parametrize("jobs", [github_commands(), gitlab_commands()], ids=["github", "gitlab"])
def test_each_job_gates_on_abserve_runs_exit_code_with_a_summary(jobs: dict[str, list[str]]) -> None:
    for name, commands in jobs.items():
        text = "\n".join(commands)
        assert "make run" not in text, name  # make run succeeds on any verdict
        assert "|| true" not in text, name
        [run] = abserve_calls(commands, "run")
        assert run[0] in ("configs/cpu-default.yaml", "configs/nightly-cpu.yaml"), name
        assert "--summary-md" in run, name
        assert "--summary-link-base" in run, name
    nightly = next(cmds for name, cmds in jobs.items() if "nightly" in name)
    [ledger] = abserve_calls(nightly, "ledger")
    assert ledger[ledger.index("--out") + 1] == "site"
    assert "--db" in abserve_calls(nightly, "run")[0]  # the ledger outlives the job


def test_the_signoff_steps_are_not_allowed_to_fail_and_the_reports_are_published() -> None:
    for job in ("pull-request", "nightly"):
        steps = github_steps(job)
        signoff = next(s for s in steps if "abserve run" in s.get("run", ""))
        assert not signoff.get("continue-on-error")
        assert "if" not in signoff  # runs whenever the job does: its exit code is the gate
        upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
        assert upload["if"] == "always()"
        published = upload["with"]["path"].split()
        assert published == (["runs/pr"] if job == "pull-request" else ["runs/nightly", "site"])
    for name in gitlab_commands():
        job = gitlab()[name]
        assert not job.get("allow_failure")
        assert job["artifacts"]["when"] == "always"
        assert re.fullmatch(r"runs/\w+/junit\.xml", job["artifacts"]["reports"]["junit"])


def test_the_nightly_config_takes_its_baseline_from_the_accepted_release() -> None:
    assert configs_named() == {"configs/cpu-default.yaml", "configs/nightly-cpu.yaml"}
    nightly = yaml.safe_load((ROOT / "configs/nightly-cpu.yaml").read_text())
    assert nightly["extends"] == "cpu-default.yaml"
    assert nightly["arms"]["a"]["from"] == "accepted"
    # judged by the release policy: no change-specific claim an unchanged build could not prove
    policy = load_policy(load_experiment(ROOT / "configs/nightly-cpu.yaml").policy)
    assert (policy.name, policy.improvements, policy.per_item) == ("release-cpu", (), ())
    assert {r.name for r in policy.metrics if r.critical} >= {"tpot.hl", "ttft.hl"}
    assert policy.equality.critical


def every_call() -> list[tuple[str, list[str]]]:
    commands = [c for jobs in (github_commands(), gitlab_commands()) for cmds in jobs.values() for c in cmds]
    return [(sub, args) for sub in ("run", "check", "report", "ledger", "accept")
            for args in abserve_calls(commands, sub)]


def test_every_abserve_command_the_examples_call_takes_the_options_they_pass() -> None:
    calls = every_call()
    assert {sub for sub, _ in calls} == {"run", "check", "ledger"}
    for sub, args in calls:
        done = CliRunner().invoke(app, [sub, "--help"], env={"COLUMNS": "200"})
        assert done.exit_code == 0, f"abserve {sub}: {done.output}"
        for option in (a for a in args if a.startswith("--")):
            assert option in done.output, f"abserve {sub} has no {option}"


@pytest.mark.process  # vLLM's own parser checks each arm's flags in a short child process
def test_every_config_the_examples_name_passes_abserve_check(tmp_path: Path) -> None:
    url = accepted_store(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "report")
    for config in sorted(configs_named()):
        done = CliRunner().invoke(app, ["check", str(ROOT / config), "--db", url])
        assert done.exit_code == 0, f"{config}: {done.output}"
        assert "arm b: managed, candidate" in done.output
