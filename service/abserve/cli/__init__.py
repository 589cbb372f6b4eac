"""The ``abserve`` command line: thin wrappers, each calling one library function.

Each area's commands live in a module of this package (``abserve.cli.<area>``) that registers
them with ``register(app)``, so this file stays a table of contents; they are the top layer
(``.importlinter``). Heavy imports happen inside the commands, not here.
"""

from __future__ import annotations

from typing import Annotated

import typer

from abserve.cli.errors import DEBUG_ENV, ContractGroup
from abserve.cli.help import EPILOG, arrange

app = typer.Typer(
    name="abserve",
    help="Serving-level A/B comparison of two vLLM builds.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    cls=ContractGroup,
    pretty_exceptions_enable=False,  # ContractGroup turns a crash into one line and a log file
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"abserve {version('abserve')}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option(
        "--debug", envvar=DEBUG_ENV, help="On an internal error, print the traceback (not only its log).")
    ] = False,
) -> None:
    """Serving-level A/B comparison of vLLM builds (the exit codes: abserve/base/exit_codes.py)."""
    root = ctx.find_root().command
    if debug and isinstance(root, ContractGroup):
        root.debug = True


def _register() -> None:
    """Add every area's commands; each module of this package registers with ``register(app)``."""
    for area in ("run", "router", "load", "report", "accept", "ledger", "compare", "rotate"):
        __import__(f"abserve.cli.{area}", fromlist=["register"]).register(app)
    arrange(app)  # panels in the order a user meets the commands; readable help (abserve.cli.help)


_register()
