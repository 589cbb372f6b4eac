"""Arm roles and their one default rule, shared by experiment configs and router settings.

An arm's role says how the judgment treats it: the ``baseline`` every other arm is compared
with, a ``candidate`` (the change under test), or a ``noise_floor`` (the baseline's twin, to
measure A/A' noise). Roles left out are filled in the same way everywhere: when no arm says
``role: baseline``, the default arm (the one named ``a``, else the given fallback, e.g. the
router's primary) is the baseline; every other arm without a role is a candidate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Role = Literal["baseline", "candidate", "noise_floor"]
DEFAULT_BASELINE = "a"


def resolve_roles(roles: Mapping[str, Role | None], fallback: str | None = None) -> dict[str, Role]:
    """Every arm's role, those left out (None) filled in by the module's rule."""
    default = DEFAULT_BASELINE if DEFAULT_BASELINE in roles else fallback
    has_baseline = any(role == "baseline" for role in roles.values())
    resolved: dict[str, Role] = {}
    for name, role in roles.items():
        if role is None:
            role = "baseline" if name == default and not has_baseline else "candidate"
        resolved[name] = role
    return resolved


def baselines(roles: Mapping[str, Role]) -> list[str]:
    """The arms whose role is ``baseline`` (a valid set of arms has exactly one)."""
    return [name for name, role in roles.items() if role == "baseline"]
