"""Every model a user writes (experiment, arms, policy, router settings, combine manifests, traffic
profiles) refuses unknown keys at every depth: a misspelt key never loads silently."""

from __future__ import annotations

import importlib
import inspect

import pydantic
import pytest

# The modules whose pydantic models are read from files a user writes.
USER_WRITTEN = ["abserve.config", "abserve.model.arms", "abserve.compare.policy", "abserve.router.settings",
                "abserve.runs.combine", "abserve.traffic.profiles", "abserve.runs.selftest"]
# Result models in those modules (written by abserve, never read from a user's file).
RESULTS = {"ExperimentOutcome", "SelftestResult"}


def _models(module_name: str) -> list[type[pydantic.BaseModel]]:
    module = importlib.import_module(module_name)
    return [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, pydantic.BaseModel)
            and c.__module__ == module_name and c.__name__ not in RESULTS]


def test_the_user_written_modules_have_models() -> None:
    assert sum(len(_models(name)) for name in USER_WRITTEN) >= 15


@pytest.mark.parametrize("module_name", USER_WRITTEN)
def test_every_user_written_model_forbids_unknown_keys(module_name: str) -> None:
    lenient = [m.__name__ for m in _models(module_name) if m.model_config.get("extra") != "forbid"]
    assert lenient == [], f"{module_name}: {lenient} accept unknown keys"
