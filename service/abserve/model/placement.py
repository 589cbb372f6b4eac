"""Placements: which CPUs each arm runs on in each block of a run, and the tag that says so.

The plan (``rotation``, ``block_order``, ``plan_blocks``; see ``abserve.runs.blocks`` for
why runs are cut into counterbalanced blocks) is validated by the experiment config and run
by the launcher; the tag (``a:0,b:1``) is written by the launcher on every request of a block
and read by the judgment (``compare.blocked``) and ``launch.combine``. It lives here, beside
all of them, so neither the config nor the pure judgment depends on the launcher. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal


def placement_label(placement: Mapping[str, Sequence[int]]) -> str:
    """``{"a": (0,), "b": (1,)}`` -> ``a:0,b:1``; an unpinned (or external) arm is ``none`` (a
    valid run tag value, which ``*`` is not)."""
    return ",".join(f"{arm}:{'+'.join(map(str, cpus)) or 'none'}" for arm, cpus in placement.items())


def parse_placement(label: str) -> dict[str, str]:
    """``a:0,b:1`` -> ``{"a": "0", "b": "1"}`` (the CPU set of each arm, as its label)."""
    out: dict[str, str] = {}
    for part in label.split(","):
        arm, sep, cpus = part.partition(":")
        if not sep or not arm.strip() or not cpus.strip():
            raise ValueError(f"placement {label!r}: expected 'arm:cpus,arm:cpus'")
        out[arm.strip()] = cpus.strip()
    return out


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
