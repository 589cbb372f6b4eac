"""Arm roles default one way (abserve.model.roles) in experiment configs and router settings alike."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abserve.config import ExperimentConfig
from abserve.model.roles import Role, baselines, resolve_roles
from abserve.router.settings import RouterSettings

ROLES: list[Role | None] = [None, "baseline", "candidate", "noise_floor"]


def test_arm_a_without_a_role_is_the_baseline_and_the_rest_candidates() -> None:
    assert resolve_roles({"a": None, "b": None, "h": None}) == {
        "a": "baseline", "b": "candidate", "h": "candidate"}


def test_an_explicit_baseline_wins_over_the_default() -> None:
    assert resolve_roles({"a": None, "b": "baseline"}) == {"a": "candidate", "b": "baseline"}


def test_the_fallback_is_used_only_without_an_arm_a() -> None:
    assert resolve_roles({"x": None, "y": None}, fallback="y") == {"x": "candidate", "y": "baseline"}
    assert resolve_roles({"a": None, "y": None}, fallback="y") == {"a": "baseline", "y": "candidate"}
    assert baselines(resolve_roles({"x": None, "y": None})) == []


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "x"]), st.sampled_from(ROLES), min_size=1))
def test_given_roles_are_kept_and_at_most_one_default_baseline_is_added(roles: dict[str, Any]) -> None:
    resolved = resolve_roles(roles)
    assert all(resolved[name] == role for name, role in roles.items() if role is not None)
    added = [name for name, role in roles.items() if role is None and resolved[name] == "baseline"]
    assert len(added) <= 1


def _experiment(arms: dict[str, dict[str, Any]]) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "name": "roles", "model": {"path": "/nonexistent", "served_name": "m"},
        "arms": arms, "load": {"profiles": [{"profile": "multi-image-long-context", "requests": 1}]}})


def _router(arms: dict[str, dict[str, Any]], **extra: Any) -> RouterSettings:
    urls = {name: {"url": f"http://127.0.0.1:{9000 + i}", **arm}
            for i, (name, arm) in enumerate(arms.items())}
    return RouterSettings.model_validate({"dev_mode": True, "arms": urls, **extra})


@pytest.mark.parametrize("arms", [
    {"a": {}, "b": {}},
    {"a": {}, "b": {}, "h": {}},
    {"a": {"role": "candidate"}, "b": {"role": "baseline"}},
    {"a": {}, "a2": {"role": "noise_floor"}, "b": {}},
])
def test_router_and_experiment_give_the_same_roles(arms: dict[str, dict[str, Any]]) -> None:
    experiment = _experiment({name: {"lookup": "linear", **arm} for name, arm in arms.items()})
    router = _router(arms, primary=next(name for name, arm in arms.items() if arm.get("role") != "candidate"))
    assert {n: a.role for n, a in router.arms.items()} == {n: a.role for n, a in experiment.arms.items()}


def test_a_router_without_arm_a_makes_its_primary_the_baseline() -> None:
    router = _router({"x": {}, "y": {}}, primary="y")
    assert {n: a.role for n, a in router.arms.items()} == {"x": "candidate", "y": "baseline"}


def test_two_baselines_are_refused_by_both() -> None:
    with pytest.raises(ValueError, match="exactly one arm must be the baseline"):
        _router({"a": {"role": "baseline"}, "b": {"role": "baseline"}})
    with pytest.raises(ValueError, match="exactly one arm must be the baseline"):
        _experiment({"a": {"lookup": "linear", "role": "baseline"},
                     "b": {"lookup": "linear", "role": "baseline"}})
