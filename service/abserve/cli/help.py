"""How ``abserve --help`` reads: plain metavars, reflowed text, panels in the order a user meets them.

Typer prints ``<bool>`` beside every flag, shows a required argument as ``{run_id}`` in the usage
line and keeps a docstring's source line breaks, which cut sentences at a narrow terminal.
``ReadableParams`` (the root group and every command) shows a flag with no type and an argument
in capitals (``RUN_ID``); ``ReadableCommand`` also reflows each paragraph of its help so the
terminal wraps it. ``arrange`` gives every registered command its panel and order: the commands a
user runs first, then planning and the GPU host, then the parts ``abserve run`` drives itself.
"""

from __future__ import annotations

import re
from typing import Any, Final

import typer
from typer.core import TyperArgument, TyperCommand
from typer.models import CommandInfo

FIRST: Final = "Run and judge"
MORE: Final = "Plan, and the GPU host"
PARTS: Final = "Parts of a run (abserve run drives them)"
PANELS: Final[dict[str, tuple[str, ...]]] = {
    FIRST: ("run", "check", "report", "watch", "compare", "ledger", "accept"),
    MORE: ("plan", "placement-bias", "rotate", "combine", "selftest"),
    PARTS: ("router", "load", "load-worker", "corpus", "prove", "build-model"),
}
# Every code of abserve.base.exit_codes (tests/unit/cli/test_help_text.py checks it).
EPILOG: Final = (
    "Exit codes (every command): 0 pass, 1 fail, 2 inconclusive or marginal, 3 invalid; "
    "4 usage error or refused input, 5 internal error (its log named on stderr); "
    "6 load's error rate over its limit, 7 a load worker lost; 130 interrupted."
)

_LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+[.)])\s")


def reflow(text: str) -> str:
    """TEXT with each paragraph on one line (list items each on their own), so the terminal wraps it.

    A paragraph that starts with ``\\b`` (Click's "keep as written") is left alone.
    """
    paragraphs = []
    for paragraph in text.split("\n\n"):
        if paragraph.lstrip().startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not _LIST_ITEM.match(line):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


class ReadableParams:
    """Flags without a ``<bool>``, arguments named in capitals (mixed into Typer's command classes)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if isinstance(param, TyperArgument):
                if param.metavar is None:
                    param.metavar = (param.name or "").upper()
            elif getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class ReadableCommand(ReadableParams, TyperCommand):
    """A command whose help is reflowed and whose usage line names arguments in capitals."""

    def __init__(self, name: str | None, **kwargs: Any) -> None:
        if kwargs.get("help"):
            kwargs["help"] = reflow(kwargs["help"])
        super().__init__(name, **kwargs)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = f"{param.metavar}{'...' if param.nargs != 1 else ''}"
                pieces.append(name if param.required else f"[{name}]")
        return pieces


def command_name(info: CommandInfo) -> str:
    """The name a registered command is called by (Typer's rule: the function's, with dashes)."""
    if info.name:
        return info.name
    return getattr(info.callback, "__name__", "").replace("_", "-")


def arrange(app: typer.Typer) -> None:
    """Give every command of APP its panel, its place and readable help (unlisted ones: MORE)."""
    order = [name for names in PANELS.values() for name in names]
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}

    def place(info: CommandInfo) -> tuple[int, int]:
        name = command_name(info)
        panel = panel_of.get(name, MORE)
        rank = order.index(name) if name in order else len(order)
        return list(PANELS).index(panel), rank

    app.registered_commands.sort(key=place)
    for info in app.registered_commands:
        info.rich_help_panel = info.rich_help_panel or panel_of.get(command_name(info), MORE)
        if info.cls in (None, TyperCommand):  # Typer's default; a command's own class stays
            info.cls = ReadableCommand
