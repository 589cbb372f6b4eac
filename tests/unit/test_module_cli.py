"""``abserve.module_cli``: a module's Typer app run like argparse's ``main``: the exit code
returned, 2 and the usage for bad options."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer

from abserve.base import module_cli

app = module_cli.app_of()


@app.command()
def _command(code: Annotated[int, typer.Option()],
             flag: Annotated[bool, typer.Option("--flag")] = False) -> None:
    """A module's entry point."""
    print(f"code {code} flag {flag}")
    if code:
        raise typer.Exit(code)


def test_the_commands_exit_code_is_returned(capsys: pytest.CaptureFixture[str]) -> None:
    assert module_cli.run(app, ["--code", "0", "--flag"], "prog") == 0
    assert module_cli.run(app, ["--code", "3"], "prog") == 3
    assert capsys.readouterr().out == "code 0 flag True\ncode 3 flag False\n"


def test_a_usage_error_is_2_with_the_usage_and_help_is_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert module_cli.run(app, ["--no-flag", "--code", "1"], "prog") == 2
    assert "Usage: prog" in capsys.readouterr().err
    assert module_cli.run(app, [], "prog") == 2
    assert module_cli.run(app, ["--help"], "prog") == 0
    assert "A module's entry point." in capsys.readouterr().out
