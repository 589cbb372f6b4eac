"""The ``abserve`` command line: thin wrappers, each calling one library function.

Each area registers its own commands from ``abserve.<area>.commands`` so that this file
stays a table of contents. Heavy imports happen inside the commands, not here.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="abserve",
    help="Serving-level A/B comparison of two vLLM builds.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """Serving-level A/B comparison of two vLLM builds."""


def _register() -> None:
    """Add every area's commands; an area registers with ``register(app)``."""
    from abserve.launch import commands as launch_commands

    launch_commands.register(app)
    from abserve.router import commands as router_commands

    router_commands.register(app)
    from abserve.traffic import commands as traffic_commands

    traffic_commands.register(app)
    from abserve.report import commands as report_commands

    report_commands.register(app)


_register()
