"""``abserve router --config FILE``: run the A/B router under uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def serve(config: Path, host: str | None = None, port: int | None = None) -> None:
    """Load settings and serve the router until SIGINT/SIGTERM (then drain and flush)."""
    import uvicorn

    from abserve.router import create_app, load_settings

    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    settings = load_settings(config, **overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        access_log=False,  # our own log line per exchange; no headers, no bodies
        timeout_graceful_shutdown=int(settings.drain_timeout_s) + 5,
        backlog=2048,
        log_level="info",
    )


def register(app: typer.Typer) -> None:
    """Add the ``router`` command."""

    @app.command("router")
    def router(
        config: Annotated[Path, typer.Option("--config", exists=True, dir_okay=False,
                                             help="Router settings YAML")],
        host: Annotated[str | None, typer.Option(help="Override the listen address")] = None,
        port: Annotated[int | None, typer.Option(help="Override the listen port")] = None,
    ) -> None:
        """Serve the A/B router (fan-out to every arm, relay the primary, record all)."""
        try:
            serve(config, host, port)
        except ValueError as exc:  # settings refused (pydantic ValidationError is one)
            typer.echo(f"router: invalid settings: {exc}", err=True)
            raise typer.Exit(2) from exc
