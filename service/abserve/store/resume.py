"""When a stopped run may be reopened by a restarted router, and what the run keeps of it.

A router restarted with the same run id (``docker compose restart router``, the router's
``resume`` setting) reopens its run instead of failing on ``RunExistsError``:
``Store.resume_run`` checks, claims and stamps the run in one transaction; this module is
its pure part.

- ``config_conflicts``: the differences between the recorded router config and the new
  one that would make the two halves of the run incomparable: the arms (names, URLs,
  roles), the primary, and every setting that changes what the arms are sent. Limits,
  deadlines, ports and paths may change between the halves.

What the run keeps of each restart is ``provenance.router_restarts``
(``abserve.model.provenance.RouterRestart``), appended by ``Store.resume_run``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Top-level router settings that change the arms' requests or which arm answers the client.
SENT_SETTINGS = ("primary", "top_logprobs", "seed_policy", "default_seed", "seeded_sampling",
                 "request_usage", "prompt_logprobs_fraction", "prompt_logprobs_k")
ARM_FIELDS = ("url", "role")


def config_conflicts(recorded: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two ``RouterSettings.public_config()`` documents that matters to
    the comparison, one ``what: recorded -> new`` line each; empty when they may share a run."""
    problems = [f"{key}: {recorded.get(key)!r} -> {new.get(key)!r}"
                for key in SENT_SETTINGS if recorded.get(key) != new.get(key)]
    old_arms, new_arms = _arms(recorded), _arms(new)
    if sorted(old_arms) != sorted(new_arms):
        problems.append(f"arms: {sorted(old_arms)} -> {sorted(new_arms)}")
        return problems
    for name in sorted(old_arms):
        problems += [f"arms.{name}.{field}: {old_arms[name].get(field)!r} -> "
                     f"{new_arms[name].get(field)!r}"
                     for field in ARM_FIELDS if old_arms[name].get(field) != new_arms[name].get(field)]
    return problems


def _arms(config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    arms = config.get("arms")
    if not isinstance(arms, Mapping):
        return {}
    return {str(name): arm if isinstance(arm, Mapping) else {} for name, arm in arms.items()}
