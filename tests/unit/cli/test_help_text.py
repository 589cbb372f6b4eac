"""``abserve --help`` and every command's ``--help`` read cleanly at 80 columns.

Each command's summary in the root panel is one whole sentence that fits the panel (at most two
lines) and is wrapped only where the line is full: a docstring's hard line break used to cut it
mid-sentence. Details live in the command's own help, reflowed the same way. No ``<bool>`` beside
a flag, arguments named in capitals in the usage line, no raw double backquotes, the epilog names
every exit code, and the commands come in the order a user meets them (abserve.cli.help).
"""

from __future__ import annotations

import functools
import itertools
import re

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from abserve.base import exit_codes
from abserve.cli import app
from abserve.cli.help import EPILOG, FIRST, PANELS, PARTS

WIDTH = 80
SIDE = "│"


@functools.cache
def render(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": ""})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) == WIDTH, "not rendered at 80 columns"
    return result.output


@functools.cache
def commands() -> dict[str, str]:
    """Each command's name and its summary (the first paragraph of its help, on one line)."""
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return {name: " ".join((cmd.help or "").split("\n\n")[0].split()) for name, cmd in group.commands.items()}


def early_breaks(lines: list[str], width: int) -> list[str]:
    """Lines broken before the next word had to move (a hard break, not the terminal's wrap)."""
    return [line for line, after in itertools.pairwise(lines)
            if len(line) + 1 + len(after.split()[0]) <= width]


def panel_rows(text: str) -> tuple[list[str], dict[str, list[str]], int]:
    """The command panels' rows: the command order, each one's description lines, their width."""
    order: list[str] = []
    rows: dict[str, list[str]] = {}
    width = 0
    known = commands()
    for line in text.splitlines():
        if not line.startswith(SIDE):
            continue
        inner = line[1:-1]
        name = inner.split()[0] if inner.strip() else ""
        if inner.startswith(" ") and not inner.startswith("  ") and name in known:
            order.append(name)
            start = inner.index(name) + len(name)
            start += len(inner[start:]) - len(inner[start:].lstrip())
            width = len(inner) - start - 1  # one space of padding before the right border
            rows[name] = [inner[start:].rstrip()]
        elif order and not inner.startswith(" -") and inner.strip() and inner[:start].strip() == "":
            rows[order[-1]].append(inner[start:].rstrip())
    return order, rows, width


def test_every_summary_is_one_whole_sentence_that_fits_the_panel() -> None:
    order, rows, width = panel_rows(render())
    summaries = commands()
    assert set(order) == set(summaries)
    problems = []
    for name, lines in rows.items():
        shown = " ".join(lines)
        if shown != summaries[name]:
            problems.append(f"{name}: the panel shows {shown!r}, not its summary {summaries[name]!r}")
        if early_breaks(lines, width):
            problems.append(f"{name}: cut mid-sentence after {early_breaks(lines, width)[0]!r}")
        if len(lines) > 2:
            problems.append(f"{name}: {len(lines)} lines at 80 columns (a summary fits in two)")
        if not shown.endswith(".") or re.search(r"\. [A-Z]", shown):
            problems.append(f"{name}: not one sentence: {shown!r}")
    assert not problems, "\n".join(problems)


def test_commands_come_in_the_order_a_user_meets_them() -> None:
    order, _rows, _width = panel_rows(render())
    assert order[:len(PANELS[FIRST])] == list(PANELS[FIRST])
    assert order[0] == "run"
    assert order[-1] == "build-model"
    assert all(order.index(part) > order.index("accept") for part in PANELS[PARTS] if part in order)


@pytest.mark.parametrize("command", sorted(commands()))
def test_a_commands_own_help_reads_cleanly(command: str) -> None:
    text = render(command)
    lines = text.splitlines()
    usage = next(line for line in lines if "Usage:" in line)
    assert "{" not in usage, usage
    assert re.search(r"Usage: abserve [\w-]+ \[OPTIONS\]( \[?[A-Z_]+(\.\.\.)?\]?)*\s*$", usage), usage
    assert "<bool>" not in text
    assert "``" not in text
    top = lines[lines.index(usage) + 1:next(i for i, line in enumerate(lines) if line.startswith("╭"))]
    paragraphs = "\n".join(line.rstrip() for line in top).strip("\n").split("\n\n")
    for paragraph in paragraphs:
        body = [line.strip() for line in paragraph.splitlines() if not line.strip().startswith(("-", "*"))]
        assert not early_breaks(body, WIDTH - 2), f"{command}: a hard line break in {paragraph!r}"
    assert " ".join(paragraphs[0].split()) == commands()[command]


def test_the_root_help_has_no_bool_metavar_and_every_exit_code() -> None:
    text = render()
    assert "<bool>" not in text
    for code in exit_codes.MEANING:
        assert re.search(rf"(?<!\d){code} ", EPILOG), f"the epilog lacks exit code {code}"
    epilog = " ".join(text.split("interrupted.")[0].split("Exit codes")[-1].split())
    assert epilog.endswith("130"), epilog
    assert " ".join(EPILOG.split()) in " ".join(text.split())


def test_prove_names_no_deployment_path() -> None:
    assert "docker compose path" not in " ".join(render().split())
