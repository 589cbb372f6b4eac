"""The exit-code contract enforced at the top of the ``abserve`` command (``abserve.base.exit_codes``).

Click exits 2 on a usage error and Python 1 on an uncaught exception, which a CI job would read
as INCONCLUSIVE and FAIL. ``ContractGroup`` runs every subcommand in non-standalone mode and
maps what escapes: usage errors (an unknown option, a bad value) exit 4 with Click's message;
an unexpected exception exits 5 with one line on stderr naming a log file that holds the
traceback (``--debug`` or ``ABSERVE_DEBUG=1`` prints the traceback instead); Ctrl-C exits 130.
The commands' own codes (verdicts 0-3, their refusals 4) pass through unchanged; a command
whose extra is not installed exits 4 with one line naming it (``abserve.cli.extras``).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from abserve.base import exit_codes
from abserve.cli.extras import missing_extra, needs_extra
from abserve.cli.help import ReadableParams

DEBUG_ENV = "ABSERVE_DEBUG"


def crash_log_dir() -> Path:
    """Where crash tracebacks go: ``$XDG_STATE_HOME/abserve`` (default ``~/.local/state/abserve``)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "abserve"


def write_crash_log(exc: BaseException) -> Path:
    """Write EXC's traceback to a fresh file and return its path (a temp folder if state is read-only)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = "".join(traceback.format_exception(exc))
    for folder in (crash_log_dir(), Path(tempfile.gettempdir())):
        path = folder / f"crash-{stamp}-{os.getpid()}.log"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(" ".join(sys.argv) + "\n\n" + text)
        except OSError:
            continue
        return path
    return Path("(no writable folder for the log)")


def report_crash(exc: BaseException, debug: bool) -> NoReturn:
    """One line on stderr (or the traceback with --debug), then exit ``CRASH``."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
        sys.exit(exit_codes.CRASH)
    log = write_crash_log(exc)
    message = str(exc).splitlines()[0] if str(exc) else ""
    typer.echo(f"abserve: internal error: {type(exc).__name__}: {message} (traceback in {log}; "
               f"--debug shows it)", err=True)
    sys.exit(exit_codes.CRASH)


def exit_status(returned: Any) -> int:
    """The process status for what a non-standalone Click command returned (an Exit's code or None)."""
    return returned if isinstance(returned, int) else exit_codes.PASS


def _command_of(group: TyperGroup, args: Sequence[str] | None) -> str | None:
    """The subcommand ARGS name (the first word that is one of GROUP's commands)."""
    words = sys.argv[1:] if args is None else args
    return next((word for word in words if word in group.commands), None)


class ContractGroup(ReadableParams, TyperGroup):
    """The root group: every way out of ``abserve`` ends in a code of the contract."""

    debug = False  # set by the root callback's --debug (or ABSERVE_DEBUG=1) for this invocation

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        self.debug = os.environ.get(DEBUG_ENV) == "1"
        try:
            returned = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except TyperException as exc:  # Click's UsageError, BadParameter, NoSuchOption...
            show = getattr(exc, "show", None)
            show() if callable(show) else typer.echo(f"Error: {exc.format_message()}", err=True)
            status = exit_codes.USAGE
        except typer.Abort:
            typer.echo("interrupted", err=True)
            status = exit_codes.INTERRUPTED
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            lacking = missing_extra(exc)
            if lacking is None:
                report_crash(exc, self.debug)
            typer.echo(needs_extra(_command_of(self, args), lacking), err=True)
            status = exit_codes.USAGE
        else:
            status = exit_status(returned)
        if not standalone_mode:
            return status
        sys.exit(status)
