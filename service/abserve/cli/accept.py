"""CLI of the release ledger's write side: ``abserve accept``.

``abserve accept RUN_ID --as NAME [--db URL] [--runs DIR] [--arm ARM]`` marks a passed
sign-off's candidate build as the accepted baseline of its config (``abserve.ledger.book``);
an arm ``from: accepted`` then starts that build (``abserve.ledger.baseline``). The store is
found as ``abserve report`` finds it: ``--db``, else the SQLite store under ``--runs`` holding
RUN_ID. Exit 0 accepted; 4 refused (an unknown run, a run with no report yet, a run that did
not pass, an unreadable store), with one line saying why.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes
from abserve.ledger.entry import AcceptedBuild


def accept_command(
    run_id: Annotated[str, typer.Argument(help="The passed sign-off whose candidate build to accept.")],
    name: Annotated[str, typer.Option("--as", help="The release's name (v0.8.0, nightly-2026-12-06, ...).")],
    db: Annotated[str | None, typer.Option(
        "--db", envvar="ABSERVE_DATABASE_URL", show_envvar=False,
        help="Store URL (default: $ABSERVE_DATABASE_URL, else the SQLite store under --runs that "
             "holds RUN_ID).")] = None,
    runs: Annotated[Path, typer.Option("--runs", help="Where to look for the store without --db.")] = Path(
        "runs"),
    arm: Annotated[str | None, typer.Option(
        "--arm", help="The candidate arm to accept, when the run has several.")] = None,
) -> None:
    """Accept RUN_ID's candidate build as its config's baseline: `from: accepted` starts it."""
    from sqlalchemy.exc import SQLAlchemyError

    from abserve.ledger.book import LedgerError, accept
    from abserve.report.judging import ReportError, open_store, store_location
    from abserve.store import StoreError

    try:
        url, _, where = store_location(run_id, db, runs)
        typer.echo(where)
        with open_store(url) as store:
            accepted = accept(store, run_id, name, time.time(), arm)
    except (ReportError, LedgerError, StoreError, ValueError) as exc:
        typer.echo(f"accept refused: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    except SQLAlchemyError as exc:
        typer.echo(f"accept refused: the store cannot be read: {type(exc).__name__}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    typer.echo(accepted_line(accepted))


def accepted_line(accepted: AcceptedBuild) -> str:
    """What was accepted, in one line."""
    build = accepted.build
    what = [f"vLLM {build.vllm_version}" if build.vllm_version else "vLLM version unknown"]
    what += [f"image {build.image}"] if build.image else []
    what += [f"install {' '.join(build.install)}"] if build.install else []
    what += [f"git {build.git_sha[:12]}"] if build.git_sha else []
    then = ("an arm `from: accepted` of this config now starts this build" if accepted.arm_config else
            "its run recorded no arm configuration (an older abserve), so an arm `from: accepted` "
            "cannot start it")
    return (f"accepted run {accepted.run_id} arm {accepted.arm} as release {accepted.name!r} of config "
            f"{accepted.config_name!r} ({', '.join(what)}); {then}")


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("accept")(accept_command)
