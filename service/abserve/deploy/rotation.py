"""Counterbalanced GPU sign-off (``abserve rotate``, ``scripts/gpu-rotation.sh``): the arms swap GPUs
between blocks in a balanced order (ABBA...).

Two GPUs are not identical, and a running vLLM server cannot move to another GPU, so on a GPU
host each block is a whole sign-off (``scripts/signoff.sh``) with ``ABSERVE_GPU_A`` /
``ABSERVE_GPU_B`` swapped (the shell's environment wins over ``.env`` in compose's
interpolation). ``abserve combine`` then merges the block runs (each in its own SQLite store)
into one run tagged by block and placement, and ``abserve report`` judges it within placements
with the config's policy; both run in the orchestrator service's container as the host user,
who owns ``runs/``. The command exits with that report's code.

The config is read with the one reader of compose configs (``compose_env.load_experiment``:
``extends:``, packaged names, the policy resolved, the mount check), and the block order is
``abserve.model.placement``'s (``balanced`` over two GPU "sets": ABBA), not written again here.
``plan`` and ``container_policy`` are pure; ``rotate`` is the thin shell around docker.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from abserve.base import exit_codes
from abserve.base.packaged import FOLDER, packaged_root
from abserve.deploy.gpu_preflight import read_env_file
from abserve.model.placement import plan_blocks

PREFIX = "gpu-rotation"  # every line starts so (scripts/compose-check.sh reads the last one)
SIGNOFF = Path("scripts/signoff.sh")
CONTAINER_ROOT = Path("/app")  # where the orchestrator service mounts configs/ and traffic/
CONTAINER_RUNS = "/runs"  # where it mounts the runs folder


class RotationRefused(ValueError):
    """The rotation cannot start; the message is the one line to print."""


@dataclass(frozen=True)
class RotationBlock:
    """One block: its index and the GPU of arm a and of arm b."""

    index: int
    gpu_a: int
    gpu_b: int

    @property
    def placement(self) -> str:
        """The block's placement tag, as ``abserve combine`` records it."""
        return f"a:gpu{self.gpu_a},b:gpu{self.gpu_b}"


def plan(blocks: int, gpu_x: int, gpu_y: int) -> list[RotationBlock]:
    """The blocks in ABBA order: a on ``gpu_x`` and b on ``gpu_y``, then swapped, then back."""
    if blocks < 2 or blocks % 2:
        raise RotationRefused(f"BLOCKS must be even and at least 2 (balanced), not {blocks}")
    if gpu_x == gpu_y:
        raise RotationRefused(f"GPU_X and GPU_Y are both {gpu_x}: the rotation swaps two GPUs")
    order = plan_blocks(["a", "b"], [[gpu_x], [gpu_y]], blocks, "balanced")
    return [RotationBlock(b.index, b.placement["a"][0], b.placement["b"][0]) for b in order]


def container_policy(policy: Path, root: Path) -> str:
    """The policy as the orchestrator's container names it: a file of this checkout (``root``)
    at its mount under ``/app``, a packaged one by its packaged name."""
    resolved = policy.resolve()
    if resolved.is_relative_to(root.resolve()):
        return str(CONTAINER_ROOT / resolved.relative_to(root.resolve()))
    shipped = resolved.relative_to(packaged_root().resolve())  # the mount check allows no other
    if shipped.parent == Path(FOLDER["policy"]) and shipped.suffix == ".yaml":
        return shipped.stem  # a packaged policy name: the container's own copy
    return f"configs/{shipped.as_posix()}"


def runs_dir(env_file: Path) -> Path:
    """The runs folder ``signoff.sh`` writes to: ``ABSERVE_RUNS_DIR`` of the env file, else ./runs."""
    text = env_file.read_text(encoding="utf-8") if env_file.is_file() else ""
    return Path(read_env_file(text).get("ABSERVE_RUNS_DIR") or "./runs")


def rotation_id(config: Path) -> str:
    """``rotation-<config>-<UTC time>-<random>``; each block's run is ``<id>-b<index>``."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"rotation-{config.stem}-{stamp}-{random.randint(0, 32767)}"


def manifest_entry(block: RotationBlock, run_id: str) -> dict[str, str]:
    """One block of ``blocks.yaml``, the manifest ``abserve combine`` reads (container paths)."""
    return {"database_url": f"sqlite:///{CONTAINER_RUNS}/{run_id}/abserve.db", "run_id": run_id,
            "placement": block.placement}


Runner = Callable[..., subprocess.CompletedProcess[bytes]]


@dataclass(frozen=True)
class Rotation:
    """What one rotation runs: the config (as given, relative to the checkout), its policy's
    name in the container, the env file, and the blocks."""

    config: Path
    policy: str
    env_file: Path
    blocks: list[RotationBlock]


def run_blocks(rotation: Rotation, rotation_dir: Path, rotation_name: str,
               say: Callable[[str], None], run: Runner = subprocess.run) -> None:
    """Each block a whole ``signoff.sh`` run with the GPUs swapped; ``blocks.yaml`` written as
    they go. A block's own verdict is not the sign-off: its code is ignored."""
    rotation_dir.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, str]] = []
    for block in rotation.blocks:
        run_id = f"{rotation_name}-b{block.index}"
        say(f"{PREFIX}: block {block.index} of {len(rotation.blocks)}: a on GPU {block.gpu_a}, "
            f"b on GPU {block.gpu_b} (run {run_id})")
        env = {**os.environ, "ABSERVE_RUN_ID_OVERRIDE": run_id, "ABSERVE_GPU_A": str(block.gpu_a),
               "ABSERVE_GPU_B": str(block.gpu_b)}
        run([str(SIGNOFF), str(rotation.config)], env=env, stdin=subprocess.DEVNULL, check=False)
        entries.append(manifest_entry(block, run_id))
        (rotation_dir / "blocks.yaml").write_text(yaml.safe_dump(entries, sort_keys=False))


def combine_and_report(rotation: Rotation, rotation_name: str,
                       run: Runner = subprocess.run) -> tuple[int, str | None]:
    """``abserve combine`` then ``abserve report`` in the orchestrator's container, as the host
    user; the stack torn down after. The report's code, or INVALID and why there is none."""
    compose = ["docker", "compose", "--env-file", str(rotation.env_file)]
    service = [*compose, "run", "--rm", "--no-deps", "-T", "--user", f"{os.getuid()}:{os.getgid()}",
               "--entrypoint", "abserve", "orchestrator"]
    db = f"sqlite:///{CONTAINER_RUNS}/{rotation_name}/abserve.db"
    out = f"{CONTAINER_RUNS}/{rotation_name}"
    try:
        combined = run([*service, "combine", f"{out}/blocks.yaml", "--db", db, "--into", rotation_name],
                       check=False).returncode
        if combined != 0:
            return exit_codes.INVALID, f"abserve combine exited {combined}"
        code = run([*service, "report", rotation_name, "--db", db, "--out", out, "--policy", rotation.policy],
                   check=False).returncode
        if code not in exit_codes.MEANING:  # docker's own failure: the report never ran
            return exit_codes.INVALID, f"abserve report did not run (docker exited {code})"
        return code, None
    finally:
        run([*compose, "down", "--remove-orphans"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=False)


def rotate(rotation: Rotation, say: Callable[[str], None], environ: Mapping[str, str],
           run: Runner = subprocess.run) -> int:
    """The whole rotation (``GPU_ROTATION_DRY_RUN=1``: the plan only); its exit code."""
    name = rotation_id(rotation.config)
    if environ.get("GPU_ROTATION_DRY_RUN", "0") == "1":
        for block in rotation.blocks:
            say(f"block {block.index} run {name}-b{block.index} a:gpu{block.gpu_a} b:gpu{block.gpu_b}")
        return exit_codes.PASS
    if not SIGNOFF.is_file():
        raise RotationRefused(f"no {SIGNOFF}: run it from the root of the checkout")
    folder = runs_dir(rotation.env_file) / name
    run_blocks(rotation, folder, name, say, run)
    code, failed = combine_and_report(rotation, name, run)
    if failed is not None:
        say(f"{PREFIX}: no combined report: {failed}; the block runs are in {folder.as_posix()}-b* "
            f"(exit {code})")
    else:
        say(f"{PREFIX}: combined report in {folder.as_posix()} (exit {code})")
    return code
