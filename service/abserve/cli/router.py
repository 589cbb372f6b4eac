"""``abserve router --config FILE``: run the A/B router under uvicorn.

One process by default (``router/serve.py``: uvloop, httptools, a frozen heap); ``--workers N``
runs N processes behind the port, sharing one run in PostgreSQL (``router/workers.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes


def serve(config: Path | None, host: str | None = None, port: int | None = None,
          workers: int = 1, join: bool = False, db: str | None = None,
          run_id: str | None = None, join_wait: float = 60.0) -> None:
    """Load settings and serve the router until SIGINT/SIGTERM (then drain and flush);
    with ``workers`` > 1 as that many processes behind one port (``router/workers.py``)."""
    from abserve.router import load_settings
    from abserve.router.serve import run_app

    overrides = {k: v for k, v in {"host": host, "port": port, "run_id": run_id}.items()
                 if v is not None}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if join:
        from abserve.router.replica import serve_replica

        if workers != 1:
            raise ValueError("--join serves one process: start one replica per host or port")
        serve_replica(config, overrides, join_wait, db)
        return
    if config is None:
        raise ValueError("--config is required (only --join can take the run's settings from --db)")
    if workers != 1:
        from abserve.router.workers import serve_workers

        serve_workers(config, overrides, workers)
        return
    run_app(load_settings(config, **overrides))


def register(app: typer.Typer) -> None:
    """Add the ``router`` command."""

    @app.command("router")
    def router(
        config: Annotated[Path | None, typer.Option("--config", exists=True, dir_okay=False,
                                                    help="Router settings YAML")] = None,
        host: Annotated[str | None, typer.Option(help="Override the listen address")] = None,
        port: Annotated[int | None, typer.Option(help="Override the listen port")] = None,
        workers: Annotated[int, typer.Option(
            min=1, help="Router processes behind the port (more than 1 needs PostgreSQL)")] = 1,
        join: Annotated[bool, typer.Option(
            "--join", help="Serve as one more replica of the run the first router of the same "
                           "settings owns, on this host (PostgreSQL; docs/scale-out.md)")] = False,
        db: Annotated[str | None, typer.Option(
            help="With --join and no --config: the run's PostgreSQL store, whose recorded "
                 "settings this replica takes")] = None,
        run_id: Annotated[str | None, typer.Option(
            help="With --join and no --config: the run to join (abserve run --run-id)")] = None,
        join_wait: Annotated[float, typer.Option(
            help="With --join: seconds to wait for the run to be created")] = 60.0,
    ) -> None:
        """Serve the A/B router (fan-out to every arm, relay the primary, record all)."""
        from abserve.router.serve import StartupError

        try:
            serve(config, host, port, workers, join, db, run_id, join_wait)
        except ValueError as exc:  # settings refused (pydantic ValidationError is one)
            typer.echo(f"router: invalid settings: {exc}", err=True)
            raise typer.Exit(exit_codes.USAGE) from exc
        except StartupError as exc:
            typer.echo(f"router: {exc}", err=True)
            raise typer.Exit(exit_codes.USAGE) from exc
