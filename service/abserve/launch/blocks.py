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
  server's whole process tree (``abserve.launch.server.pin_tree``) without a restart.

Everything but ``apply_placement`` is pure. The tag format itself (``placement_label``,
``parse_placement``) is ``abserve.placement``, shared with the judgment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from abserve.placement import parse_placement, placement_label  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from abserve.config import ExperimentConfig
    from abserve.launch.server import VllmServer

Order = Literal["balanced", "cyclic", "fixed"]
Placement = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class Block:
    """One block of the plan: its index, the rotation it uses, and each arm's CPUs."""

    index: int
    rotation: int
    placement: Placement

    @property
    def label(self) -> str:
        """The placement as one tag value, e.g. ``a:0,b:1`` (``a:0+1,b:2+3`` for wider sets)."""
        return placement_label(self.placement)


def rotation(arms: Sequence[str], cpu_sets: Sequence[Sequence[int]], r: int) -> Placement:
    """Placement number ``r``: arm ``i`` on ``cpu_sets[(i + r) % len(cpu_sets)]``."""
    if not cpu_sets:
        raise ValueError("at least one CPU set is needed")
    return {arm: tuple(cpu_sets[(i + r) % len(cpu_sets)]) for i, arm in enumerate(arms)}


def block_order(count: int, rotations: int, order: Order) -> list[int]:
    """The rotation of each of ``count`` blocks."""
    if count < 1 or rotations < 1:
        raise ValueError("need at least one block and one rotation")
    if order == "fixed" or rotations == 1:
        return [0] * count
    cycle = list(range(rotations))
    if order == "balanced":
        cycle = cycle + cycle[::-1]
    return [cycle[i % len(cycle)] for i in range(count)]


def plan_blocks(arms: Sequence[str], cpu_sets: Sequence[Sequence[int]] | None, count: int,
                order: Order, static: Mapping[str, Sequence[int] | None] | None = None) -> list[Block]:
    """The whole plan. Without ``cpu_sets`` every block keeps the arms' static CPUs (or none)."""
    if cpu_sets is None:
        fixed = {arm: tuple((static or {}).get(arm) or ()) for arm in arms}
        return [Block(i, 0, dict(fixed)) for i in range(count)]
    rotations = min(len(cpu_sets), max(len(arms), 1))
    return [Block(i, r, rotation(arms, cpu_sets, r))
            for i, r in enumerate(block_order(count, rotations, order))]


def experiment_blocks(config: ExperimentConfig) -> list[Block]:
    """The block plan of an experiment config (its ``blocks`` section and arms)."""
    spec = config.blocks
    static = {name: arm.cpus for name, arm in config.arms.items()}
    return plan_blocks(list(config.arms), spec.cpu_sets, spec.count, spec.order, static)


def block_record(block: Block, started_at: float, ended_at: float, requests: int,
                 pinned: dict[str, dict[str, int]] | None = None) -> dict[str, object]:
    """What the run's provenance keeps of one block (``RunInfo.provenance["blocks"]``)."""
    return {"index": block.index, "rotation": block.rotation, "placement_label": block.label,
            "placement": {arm: list(cpus) for arm, cpus in block.placement.items()},
            "started_at": started_at, "ended_at": ended_at, "requests": requests,
            "pinned": pinned or {}}


def is_balanced(blocks: Sequence[Block]) -> bool:
    """True when every rotation used appears equally often."""
    counts: dict[int, int] = {}
    for block in blocks:
        counts[block.rotation] = counts.get(block.rotation, 0) + 1
    return len(set(counts.values())) <= 1


def split_requests(total: int, count: int) -> list[int]:
    """``total`` requests over ``count`` blocks as evenly as possible (earlier blocks get more)."""
    base, extra = divmod(total, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


def apply_placement(servers: Mapping[str, VllmServer], placement: Placement) -> dict[str, dict[str, int]]:
    """Re-pin every running server's whole process tree onto its CPUs for this block.

    Returns, per arm, how many threads its tree has and how many are NOT on the block's
    CPUs when read back (0 when the swap took), for the block's provenance.
    """
    from abserve.launch.server import pin_tree, tree_affinities

    checked: dict[str, dict[str, int]] = {}
    for name, cpus in placement.items():
        server = servers.get(name)
        if cpus and server is not None and server.process is not None:
            pin_tree(server.process.pid, cpus)
            server.cpus = cpus
            seen = tree_affinities(server.process.pid)
            checked[name] = {"threads": len(seen), "off_placement": sum(a != set(cpus) for a in seen)}
    return checked
