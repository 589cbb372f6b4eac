"""Counterbalancing on a GPU host: merge per-block runs into one blocked run.

A running vLLM server cannot move to another GPU, so on a GPU host the counterbalanced
design is a scripted rotation (``scripts/gpu-rotation.sh``): the whole sign-off runs once
per block with the arms' GPUs swapped in a balanced order (ABBA), each block a run of its
own. This module merges those runs into one run whose exchanges carry ``block`` and
``placement`` tags, exactly as the CPU orchestrator's blocks do, so the same judgment
estimates the effect within each placement and the placement bias across them.

Every block must have proven the same lookups on every arm; the merged run keeps the first
block's arm provenance with the lookup telemetry summed over blocks, and is ``completed``
only when every block run completed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from abserve.model.placement import parse_placement
from abserve.model.provenance import BlockRecord
from abserve.model.records import ArmProvenance, LookupTelemetry, RunInfo
from abserve.model.telemetry import add_counts
from abserve.store import Store
from abserve.store.urls import shown_url


class BlockRun(BaseModel):
    """One block of the rotation: where its run is stored and where each arm ran."""

    model_config = ConfigDict(extra="forbid")
    database_url: str
    run_id: str
    placement: str  # e.g. "a:gpu0,b:gpu1"


class CombineError(ValueError):
    """The block runs cannot form one design (missing run, mismatched proofs)."""


def load_manifest(path: Path) -> list[BlockRun]:
    """The rotation's blocks, in order, from a YAML list written by the rotation script."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or []
        if not isinstance(raw, list):
            raise CombineError(f"{path}: expected a YAML list of blocks (database_url, run_id, placement)")
        return [BlockRun.model_validate(item) for item in raw]
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise CombineError(f"{path}: {exc}") from exc


def combine_runs(blocks: Sequence[BlockRun], into: str, database_url: str) -> RunInfo:
    """Merge ``blocks`` into the new run ``into`` stored at ``database_url``."""
    if not blocks:
        raise CombineError("no block runs to combine")
    runs, exchanges = [], []
    for index, block in enumerate(blocks):
        parse_placement(block.placement)
        with Store.open(block.database_url) as store:
            run = store.get_run(block.run_id)
            if run is None:
                where = shown_url(block.database_url)
                raise CombineError(f"block {index}: no run {block.run_id!r} in {where}")
            runs.append(run)
            for exchange in store.iter_exchanges(block.run_id):
                tags = {**exchange.tags, "block": str(index), "placement": block.placement}
                exchanges.append(exchange.model_copy(update={"run_id": into, "tags": tags}))
    merged = merged_run(into, blocks, runs)
    with Store.open(database_url) as target:
        target.create_run(merged.model_copy(update={"status": "running"}))
        target.write_exchanges(exchanges)
        target.finish_run(into, "completed" if merged.status == "completed" else "interrupted")
        return target.get_run(into) or merged


def merged_run(into: str, blocks: Sequence[BlockRun], runs: Sequence[RunInfo]) -> RunInfo:
    """The merged run's record: arms checked for the same proofs, telemetry summed."""
    first = runs[0]
    for block, run in zip(blocks[1:], runs[1:], strict=True):
        if _proofs(run) != _proofs(first):
            raise CombineError(f"run {block.run_id} proved {_proofs(run)}, block 0 proved {_proofs(first)}")
    arms = {name: _summed(name, runs) for name in first.arms}
    records = [block_record(i, b, r) for i, (b, r) in enumerate(zip(blocks, runs, strict=True))]
    return RunInfo(
        run_id=into,
        status="completed" if all(r.status == "completed" for r in runs) else "interrupted",
        started_at=min(r.started_at for r in runs),
        ended_at=time.time(),
        config=first.config,
        provenance=first.provenance.model_copy(update={"blocks": records,
                                                       "combined_from": [b.run_id for b in blocks]}),
        arms=arms,
    )


def block_record(index: int, block: BlockRun, run: RunInfo) -> BlockRecord:
    """What the merged run's provenance keeps of one block (as the CPU orchestrator's)."""
    return BlockRecord(index=index, run_id=block.run_id, placement_label=block.placement,
                       placement=dict(parse_placement(block.placement)),
                       started_at=run.started_at, ended_at=run.ended_at)


def _proofs(run: RunInfo) -> dict[str, tuple[str | None, str | None]]:
    return {name: (arm.expected_lookup, arm.proven_lookup) for name, arm in run.arms.items()}


def _summed(name: str, runs: Sequence[RunInfo]) -> ArmProvenance:
    arm = runs[0].arms[name].model_copy(deep=True)
    total = arm.telemetry
    for run in runs[1:]:
        add_counts(total, run.arms[name].telemetry, LookupTelemetry.model_fields)
    arm.placement = {"rotated": [run.arms[name].placement for run in runs]}
    return arm
