"""Counterbalanced blocks: which arm runs on which CPUs in each block of a run, and the swap.

Two servers sharing a small machine do not get equal CPUs: a core that also serves the
router, the load generator or interrupts is slower, so a fixed placement adds a bias to
every paired latency difference that no number of requests removes (measured here:
-0.7 to +0.5 ms per output token between two servers running identical code). The run is
therefore cut into blocks, and between blocks the arms rotate through the CPU sets in a
balanced order, so each arm spends the same share of the run in each slot and the judgment
(``abserve.compare.blocked``) can estimate the bias and cancel it.

- ``rotation(arms, cpu_sets, r)``: arm ``i`` gets ``cpu_sets[(i + r) % len(cpu_sets)]``;
  with as many sets as arms the rotations form a cyclic Latin square (every arm visits
  every slot once).
- ``block_order(count, rotations, order)``: ``balanced`` runs the rotations forward then
  backward (ABBA for two; 0,1,2,2,1,0 for three), which also cancels a linear drift in
  time; ``cyclic`` repeats them forward (ABAB); ``fixed`` never swaps (the naive design).
- ``apply_placement(servers, placement)``: the thin I/O step, re-pinning each running
  server's whole process tree (``abserve.arms.pinning.pin_tree``) without a restart.

The pure plan (``Block``, ``rotation``, ``block_order``, ``plan_blocks``, ``is_balanced``,
``split_requests``) and the tag format (``placement_label``, ``parse_placement``) live in
``abserve.model.placement``, shared with the config and the judgment, which must not depend on the
launcher; this module adds the experiment's plan, the provenance record and the re-pinning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from abserve.model.placement import (
    Block,
    Placement,
    plan_blocks,
)
from abserve.model.provenance import BlockNeighbours, BlockRecord

if TYPE_CHECKING:
    from abserve.arms.server import VllmServer
    from abserve.config import ExperimentConfig

def experiment_blocks(config: ExperimentConfig) -> list[Block]:
    """The block plan of an experiment config (its ``blocks`` section and arms)."""
    spec = config.blocks
    static = {name: arm.cpus for name, arm in config.arms.items()}
    return plan_blocks(list(config.arms), spec.cpu_sets, spec.count, spec.order, static)


def block_record(block: Block, started_at: float, ended_at: float, requests: int,
                 pinned: dict[str, dict[str, int]] | None = None,
                 neighbours: Mapping[str, object] | None = None) -> BlockRecord:
    """What the run's provenance keeps of one block (``RunInfo.provenance.blocks``);
    ``neighbours``: the foreign load on its arms' cores (``abserve.arms.neighbours``)."""
    record = BlockRecord(index=block.index, rotation=block.rotation, placement_label=block.label,
                         placement={arm: list(cpus) for arm, cpus in block.placement.items()},
                         started_at=started_at, ended_at=ended_at, requests=requests, pinned=pinned or {})
    if neighbours is not None:
        record.neighbours = BlockNeighbours.model_validate(neighbours)
    return record


def apply_placement(servers: Mapping[str, VllmServer], placement: Placement) -> dict[str, dict[str, int]]:
    """Re-pin every running server's whole process tree onto its CPUs for this block.

    Returns, per arm, how many threads its tree has and how many are NOT on the block's
    CPUs when read back (0 when the swap took), for the block's provenance.
    """
    from abserve.arms.pinning import pin_tree, tree_affinities

    checked: dict[str, dict[str, int]] = {}
    for name, cpus in placement.items():
        server = servers.get(name)
        if cpus and server is not None and server.process is not None:
            pin_tree(server.process.pid, cpus)
            server.cpus = cpus
            seen = tree_affinities(server.process.pid)
            checked[name] = {"threads": len(seen), "off_placement": sum(a != set(cpus) for a in seen)}
    return checked
