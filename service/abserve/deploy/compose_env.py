"""The environment that `docker compose` needs, derived from one GPU experiment config.

`docker-compose.yml` takes every experiment-specific value (model, vLLM server arguments,
determinism settings, which arms run, the load plan) from environment variables, so one
compose file serves every ``configs/gpu-*.yaml``. This module reads such a config with the
experiment schema (``abserve.config``, the one ``abserve run`` reads too), checks that it
fits the compose file (arm names and lookups, the router's arm URLs, no flag that compose
sets itself or that opens the server's file system) and renders the variables as an env
file for ``docker compose --env-file``. ``scripts/signoff.sh`` runs it as
``python -m abserve.deploy.compose_env CONFIG``. Pure apart from ``main``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import model_validator

from abserve.arms import ArgValue, render_args
from abserve.config import ExperimentConfig, LoadItem

# What each compose service runs: docker-compose.yml pins these per service.
SERVICE_LOOKUP: dict[str, str] = {"a": "linear", "b": "bisect", "a2": "linear"}
NOISE_FLOOR_PROFILE = "noise-floor"  # compose profile that enables vllm-a2
ARM_PORT = 8000
# Server environment the compose file passes to every arm (x-vllm-env). Not
# CUBLAS_WORKSPACE_CONFIG: vLLM sets its own under batch invariance, so a config's value would
# be recorded but not used.
PASSED_ENV = frozenset(
    {"VLLM_BATCH_INVARIANT", "VLLM_USE_V2_MODEL_RUNNER", "PYTHONHASHSEED", "ABSERVE_MM_LOOKUP_SCOPE"}
)
# Flags compose sets itself (per host or for security) and a config must not repeat.
COMPOSE_OWNED_FLAGS = frozenset(
    {"--host", "--port", "--served-model-name", "--gpu-memory-utilization",
     "--allowed-media-domains", "--model"}
)
FORBIDDEN_FLAGS = frozenset({"--allowed-local-media-path"})
POLICY = "configs/policy/default.yaml"
__all__ = ["ArgValue", "ComposeExperiment", "LoadItem", "compose_env", "load_experiment", "render_args"]

class ComposeExperiment(ExperimentConfig):
    """An experiment config (``abserve.config``, the one schema) that also fits the compose file:
    arms are its services, with the lookup each service runs, and the router's arm URLs are the
    services' URLs. Checked on the raw mapping first, so the compose reason is the one given."""

    @model_validator(mode="before")
    @classmethod
    def _fits_compose(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        server = data.get("server") or {}
        _check_compose_flags(server.get("args") or {})
        unknown = sorted(set(server.get("env") or {}) - PASSED_ENV)
        if unknown:
            raise ValueError(f"docker-compose.yml does not pass {unknown}; passed: {sorted(PASSED_ENV)}")
        arms = data.get("arms") or {}
        for arm in ("a", "b"):
            if arm not in arms:
                raise ValueError(f"arm {arm!r} is required")
        for arm, spec in arms.items():
            if arm not in SERVICE_LOOKUP:
                raise ValueError(f"arm {arm!r} has no compose service (known: {sorted(SERVICE_LOOKUP)})")
            lookup = (spec or {}).get("lookup")
            if lookup != SERVICE_LOOKUP[arm]:
                want = SERVICE_LOOKUP[arm]
                raise ValueError(f"arm {arm!r} runs {want!r} in compose, config says {lookup!r}")
        router_arms = (data.get("router") or {}).get("arms") or {}
        if set(router_arms) != set(arms):
            raise ValueError(f"router.arms {sorted(router_arms)} must equal arms {sorted(arms)}")
        for arm, spec in router_arms.items():
            want = arm_url(arm)
            if (spec or {}).get("url") != want:
                raise ValueError(f"router.arms.{arm}.url must be {want!r} (the compose service)")
        if not re.fullmatch(r"configs/[A-Za-z0-9._/-]+\.ya?ml", str(data.get("policy", POLICY))):
            raise ValueError("policy must be a configs/*.yaml path relative to the repository root")
        if not (data.get("model") or {}).get("id"):
            raise ValueError("model.id (the hub model compose serves) is required")
        return data


def _check_compose_flags(args: dict[str, Any]) -> None:
    for flag in args:
        name = flag.split("=", 1)[0].split(".", 1)[0]
        if name in FORBIDDEN_FLAGS:
            raise ValueError(f"{name} is forbidden: it lets requests read the server's files")
        if name in COMPOSE_OWNED_FLAGS:
            raise ValueError(f"{name} is set by docker-compose.yml (see .env.example)")


def arm_url(arm: str) -> str:
    """The URL of an arm's server inside the compose network."""
    return f"http://vllm-{arm}:{ARM_PORT}"


def compose_env(experiment: ComposeExperiment, config_path: str) -> dict[str, str]:
    """The compose variables of one experiment (``config_path`` relative to the repo root)."""
    plan = " ".join(item.plan_item() for item in experiment.load.profiles)
    env = {
        "ABSERVE_CONFIG": config_path,
        "ABSERVE_MODEL": experiment.model.id or "",
        "ABSERVE_MODEL_REVISION": experiment.model.revision or "main",
        "ABSERVE_SERVED_MODEL_NAME": experiment.model.served_name,
        "VLLM_SERVER_ARGS": shlex.join(render_args(experiment.server.args)),
        "ABSERVE_LOAD_PLAN": plan,
        "ABSERVE_LOAD_USERS": str(experiment.load.users),
        "ABSERVE_POLICY": experiment.policy.as_posix(),
        "COMPOSE_PROFILES": NOISE_FLOOR_PROFILE if "a2" in experiment.arms else "",
        # The arms prepare-run.sh lays out and run-report.sh proves: exactly the config's.
        "ABSERVE_ARMS": " ".join(arm for arm in SERVICE_LOOKUP if arm in experiment.arms),
    }
    env.update(experiment.server.env)
    return env


def render_env_file(env: dict[str, str]) -> str:
    """``KEY=value`` lines that compose reads literally (values are never re-quoted)."""
    lines = []
    for key, value in env.items():
        if "\n" in value or value[:1] in {"'", '"'} or "$" in value or " #" in value:
            raise ValueError(f"{key}: value cannot be written literally to an env file: {value!r}")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def load_experiment(path: Path) -> ComposeExperiment:
    """Read and check a GPU experiment config."""
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return ComposeExperiment.model_validate(raw)


def main(argv: list[str] | None = None) -> int:
    """``python -m abserve.deploy.compose_env CONFIG``: print the env file, or the error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="configs/gpu-*.yaml, relative to the repo root")
    args = parser.parse_args(argv)
    try:
        text = render_env_file(compose_env(load_experiment(args.config), args.config.as_posix()))
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"compose_env: {args.config}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(f"# derived from {args.config.as_posix()} by abserve.deploy.compose_env\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
