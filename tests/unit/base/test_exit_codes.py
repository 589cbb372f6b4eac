"""The exit-code contract (abserve/base/exit_codes.py) holds for every subcommand: usage errors exit 4,
refusals 4, crashes 5 with one line and a log, --help and --version 0; verdict codes stay 0-3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from abserve.base import exit_codes
from abserve.cli import app

REPO = Path(__file__).resolve().parents[3]


def subcommands() -> list[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return sorted(group.commands)


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})
    return result.exit_code, result.output  # stdout and stderr, interleaved


def test_every_subcommand_is_covered() -> None:
    assert {"run", "check", "router", "load", "report", "plan", "combine", "selftest",
            "build-model", "prove"} <= set(subcommands())


@pytest.mark.parametrize("command", subcommands())
def test_an_unknown_option_is_a_usage_error_not_a_verdict(command: str) -> None:
    code, out = invoke(command, "--no-such-option")
    assert code == exit_codes.USAGE, out
    assert "No such option" in out


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_has_help(command: str) -> None:
    code, out = invoke(command, "--help")
    assert code == 0, out
    assert "Usage" in out


def test_a_mistyped_option_of_run_does_not_read_as_inconclusive() -> None:
    code, out = invoke("run", "--budgit", "10m")
    assert code == exit_codes.USAGE, out
    assert not exit_codes.is_verdict(code)


def test_an_unknown_command_and_a_bad_value_are_usage_errors() -> None:
    assert invoke("no-such-command")[0] == exit_codes.USAGE
    code, out = invoke("router", "--config", "/no/such/file.yaml")
    assert code == exit_codes.USAGE, out


def test_the_root_help_states_the_contract() -> None:
    code, out = invoke("--help")
    assert code == 0
    assert "4 usage error or refused input" in " ".join(out.split())


def test_version_is_printed_by_the_root_command() -> None:
    code, out = invoke("--version")
    assert code == 0
    assert out.startswith("abserve ")


def test_refusals_are_tool_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nno_such_key: 1\n")
    for args in (["check", str(bad)], ["run", str(bad), "--out", str(tmp_path / "out")],
                 ["combine", str(bad), "--db", f"sqlite:///{tmp_path / 'x.db'}", "--into", "m"],
                 ["plan", "nope", "--db", f"sqlite:///{tmp_path / 'x.db'}"]):
        code, out = invoke(*args)
        assert code == exit_codes.USAGE, (args, out)
        assert "Traceback" not in out


def _crash(*_: object, **__: object) -> None:
    raise KeyError("boom in the tiny model")


def test_a_crash_exits_5_with_one_line_and_the_traceback_in_a_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import abserve.arms.tiny_model as tiny_model

    monkeypatch.setattr(tiny_model, "ensure_tiny_model", _crash)
    monkeypatch.delenv("ABSERVE_DEBUG", raising=False)
    code, out = invoke("build-model", "--out", str(tmp_path / "m"), env={"XDG_STATE_HOME": str(tmp_path)})
    assert code == exit_codes.CRASH, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert "internal error: KeyError" in lines[0], out
    logs = list((tmp_path / "abserve").glob("crash-*.log"))
    assert len(logs) == 1
    assert "Traceback" in logs[0].read_text()
    assert "boom in the tiny model" in logs[0].read_text()
    assert str(logs[0]) in lines[0]


def test_debug_prints_the_traceback_and_still_exits_5(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import abserve.arms.tiny_model as tiny_model

    monkeypatch.setattr(tiny_model, "ensure_tiny_model", _crash)
    monkeypatch.delenv("ABSERVE_DEBUG", raising=False)
    code, out = invoke("--debug", "build-model", "--out", str(tmp_path / "m"),
                       env={"XDG_STATE_HOME": str(tmp_path)})
    assert code == exit_codes.CRASH, out
    assert "Traceback" in out
    assert "boom in the tiny model" in out


@pytest.mark.process
def test_the_console_entry_keeps_the_contract() -> None:
    """``python -m abserve`` (what the console script runs): the codes reach the shell."""
    usage = subprocess.run([sys.executable, "-m", "abserve", "report", "--no-such-option"], cwd=REPO,
                           capture_output=True, text=True, timeout=120, check=False)
    assert usage.returncode == exit_codes.USAGE, usage.stderr
    ok = subprocess.run([sys.executable, "-m", "abserve", "--version"], cwd=REPO,
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("abserve "), ok.stderr
