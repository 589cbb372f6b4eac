"""CLI commands of the launch area: building the tiny model, serving, the demo and full run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def build_model(
    out: Annotated[Path, typer.Option("--out", help="Directory to write the model into.")],
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even if the directory matches the spec.")
    ] = False,
) -> None:
    """Build the tiny LLaVA-style model offline (deterministic bytes) into OUT."""
    from abserve.launch.tiny_model import (
        TinyModelSpec,
        build_tiny_model,
        ensure_tiny_model,
        model_identity_hash,
    )

    spec = TinyModelSpec()
    path = build_tiny_model(out, spec) if force else ensure_tiny_model(out, spec)
    typer.echo(f"model: {path}")
    typer.echo(f"tokens per image: {spec.tokens_per_image}")
    typer.echo(f"identity sha256: {model_identity_hash(path)}")


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("build-model")(build_model)
