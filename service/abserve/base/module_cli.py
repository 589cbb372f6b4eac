"""``python -m abserve.X`` entry points as small Typer apps, run like the ``abserve`` CLI.

Scripts, compose files and the router's supervisor start a few modules directly
(``abserve.deploy.compose_env``, ``abserve.router.workers``, ``abserve.store.export``, and the
test support ``tests.support.check_report``). Each declares its options with Typer, as the CLI
does, and its ``main(argv)`` returns the exit code through ``run`` instead of exiting: 0, the
code the command exits with (``typer.Exit``), 2 with a usage message for bad options (as
argparse did), so tests call ``main``.
"""

from __future__ import annotations

import typer


def app_of() -> typer.Typer:
    """A one-command app: no sub-command name, no shell-completion options; its ``--help`` is
    the command's docstring."""
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def run(app: typer.Typer, argv: list[str] | None, prog: str) -> int:
    """Run ``app`` on ``argv`` (default: ``sys.argv[1:]``) and return its exit code instead of
    exiting: 0, the code of a ``typer.Exit`` the command raised, or 2 for a usage error."""
    try:
        typer.main.get_command(app).main(args=argv, prog_name=prog, standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    return 0
