"""``abserve rotate``: the counterbalanced GPU sign-off (``abserve.deploy.rotation``), which
``scripts/gpu-rotation.sh`` runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes


def rotate(
    config: Annotated[Path, typer.Argument(
        metavar="CONFIG", help="A compose config under configs/ or traffic/, relative to the "
                               "checkout's root (the current directory).")],
    blocks: Annotated[int, typer.Argument(
        metavar="BLOCKS", help="Blocks (whole sign-offs); even: ABBA...")] = 4,
    gpu_x: Annotated[int, typer.Argument(
        metavar="GPU_X", help="arm a's GPU in the first block (b's in the second)")] = 0,
    gpu_y: Annotated[int, typer.Argument(
        metavar="GPU_Y", help="arm b's GPU in the first block (a's in the second)")] = 1,
) -> None:
    """Run a GPU sign-off in blocks with the arms swapping GPUs, and judge the blocks together.

    Runs CONFIG as BLOCKS sign-offs (scripts/signoff.sh) with arms a and b swapping GPU_X and
    GPU_Y in ABBA order, combines them and judges them within placements; exits with that
    report's code. GPU_ROTATION_DRY_RUN=1 prints the plan only; ABSERVE_ENV_FILE names the env
    file.
    """
    from abserve.deploy.compose_env import load_experiment
    from abserve.deploy.rotation import PREFIX, Rotation, container_policy, plan
    from abserve.deploy.rotation import rotate as run_rotation

    try:
        experiment = load_experiment(config)
        rotation = Rotation(config=config, policy=container_policy(experiment.policy, Path.cwd()),
                            env_file=Path(os.environ.get("ABSERVE_ENV_FILE") or ".env"),
                            blocks=plan(blocks, gpu_x, gpu_y))
        code = run_rotation(rotation, typer.echo, os.environ)
    except (OSError, ValueError) as exc:  # RotationRefused, ConfigError
        typer.echo(f"{PREFIX} refused: {str(exc).splitlines()[0]}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("rotate")(rotate)
