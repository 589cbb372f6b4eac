"""CLI commands of the launch area: building the tiny model, serving, the demo and full run."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    _ = app
