"""The placement tag: which CPUs each arm ran on, as one tag value (``a:0,b:1``).

Written by the launcher (``launch.blocks``) on every request of a block, read by the
judgment (``compare.blocked``) and by ``launch.combine``. It lives here, beside neither,
so the pure judgment does not depend on the launcher. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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
