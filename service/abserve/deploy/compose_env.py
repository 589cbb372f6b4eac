"""The environment that `docker compose` needs, derived from one GPU experiment config.

`docker-compose.yml` takes every experiment-specific value (model, vLLM server arguments,
determinism settings, which arms run, the load plan) from environment variables, so one
compose file serves every ``configs/gpu-*.yaml``. This module reads such a config, checks
that it fits the compose file (arm names and lookups, the router's arm URLs, no flag that
compose sets itself or that opens the server's file system) and renders the variables as
an env file for ``docker compose --env-file``. ``scripts/signoff.sh`` runs it as
``python -m abserve.deploy.compose_env CONFIG``. Pure apart from ``main``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# What each compose service runs: docker-compose.yml pins these per service.
SERVICE_LOOKUP: dict[str, str] = {"a": "linear", "b": "bisect", "a2": "linear"}
NOISE_FLOOR_PROFILE = "noise-floor"  # compose profile that enables vllm-a2
ARM_PORT = 8000
# Server environment the compose file passes to every arm (x-vllm-env).
PASSED_ENV = frozenset(
    {"VLLM_BATCH_INVARIANT", "VLLM_USE_V2_MODEL_RUNNER", "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG",
     "ABSERVE_MM_LOOKUP_SCOPE"}
)
# Flags compose sets itself (per host or for security) and a config must not repeat.
COMPOSE_OWNED_FLAGS = frozenset(
    {"--host", "--port", "--served-model-name", "--gpu-memory-utilization",
     "--allowed-media-domains", "--model"}
)
FORBIDDEN_FLAGS = frozenset({"--allowed-local-media-path"})

ArgValue = str | int | float | bool | dict[str, Any]


class ModelSpec(BaseModel):
    """The model every arm serves."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    revision: str = "main"
    served_name: str = Field(min_length=1)


class ServerSpec(BaseModel):
    """vLLM server arguments and environment shared by every arm."""

    model_config = ConfigDict(extra="allow")  # e.g. notes for humans
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _check_flags(cls, args: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for flag in args:
            if not flag.startswith("--"):
                raise ValueError(f"server arg {flag!r} must be a long flag (--name)")
            name = flag.split("=", 1)[0].split(".", 1)[0]
            if name in FORBIDDEN_FLAGS:
                raise ValueError(f"{name} is forbidden: it lets requests read the server's files")
            if name in COMPOSE_OWNED_FLAGS:
                raise ValueError(f"{name} is set by docker-compose.yml (see .env.example)")
        return args

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(env) - PASSED_ENV)
        if unknown:
            raise ValueError(f"docker-compose.yml does not pass {unknown}; passed: {sorted(PASSED_ENV)}")
        return env


class ArmSpec(BaseModel):
    """One arm: which lookup its server must prove."""

    model_config = ConfigDict(extra="allow")
    lookup: Literal["linear", "bisect"]


class LoadItem(BaseModel):
    """One traffic profile, how many requests of it to send, and overrides of its knobs."""

    model_config = ConfigDict(extra="forbid")
    profile: str = Field(pattern=r"^[A-Za-z0-9._/-]+$")
    requests: int = Field(gt=0)
    set: dict[str, Any] = Field(default_factory=dict)  # locustfile's --abserve-set, dotted keys

    def plan_item(self) -> str:
        """``profile:requests[:key=value;key=value]``, one word of ``ABSERVE_LOAD_PLAN``."""
        item = f"{self.profile}:{self.requests}"
        if self.set:
            pairs = ";".join(f"{key}={_plain(value)}" for key, value in self.set.items())
            item = f"{item}:{pairs}"
        if any(ch.isspace() for ch in item):
            raise ValueError(f"load item {item!r} must not contain whitespace")
        return item


def _plain(value: Any) -> str:
    """A YAML-readable scalar or compact JSON (JSON is YAML) for an override value."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class LoadSpec(BaseModel):
    """The bounded load: profiles run one after another."""

    model_config = ConfigDict(extra="allow")
    users: int = Field(8, ge=1)
    profiles: list[LoadItem] = Field(min_length=1)


class ComposeExperiment(BaseModel):
    """The parts of a GPU experiment config that docker compose consumes."""

    model_config = ConfigDict(extra="allow")  # policy, notes, ... are for other readers
    name: str
    model: ModelSpec
    server: ServerSpec
    arms: dict[str, ArmSpec]
    router: dict[str, Any]
    load: LoadSpec
    policy: str = Field("configs/policy/default.yaml", pattern=r"^configs/[A-Za-z0-9._/-]+\.ya?ml$")

    @model_validator(mode="after")
    def _fits_compose(self) -> ComposeExperiment:
        for arm in ("a", "b"):
            if arm not in self.arms:
                raise ValueError(f"arm {arm!r} is required")
        for arm, spec in self.arms.items():
            if arm not in SERVICE_LOOKUP:
                raise ValueError(f"arm {arm!r} has no compose service (known: {sorted(SERVICE_LOOKUP)})")
            if spec.lookup != SERVICE_LOOKUP[arm]:
                raise ValueError(
                    f"arm {arm!r} runs {SERVICE_LOOKUP[arm]!r} in compose, config says {spec.lookup!r}"
                )
        router_arms = self.router.get("arms") or {}
        if set(router_arms) != set(self.arms):
            raise ValueError(f"router.arms {sorted(router_arms)} must equal arms {sorted(self.arms)}")
        for arm, spec in router_arms.items():
            want = arm_url(arm)
            if (spec or {}).get("url") != want:
                raise ValueError(f"router.arms.{arm}.url must be {want!r} (the compose service)")
        return self


def arm_url(arm: str) -> str:
    """The URL of an arm's server inside the compose network."""
    return f"http://vllm-{arm}:{ARM_PORT}"


def render_args(args: dict[str, ArgValue]) -> list[str]:
    """Server args as argv: ``true`` → bare flag, ``false`` → omitted, mappings → JSON."""
    argv: list[str] = []
    for flag, value in args.items():
        if value is True:
            argv.append(flag)
        elif value is False:
            continue
        elif isinstance(value, dict):
            argv.append(f"{flag}={json.dumps(value, separators=(',', ':'), sort_keys=True)}")
        else:
            argv.append(f"{flag}={value}")
    return argv


def compose_env(experiment: ComposeExperiment, config_path: str) -> dict[str, str]:
    """The compose variables of one experiment (``config_path`` relative to the repo root)."""
    plan = " ".join(item.plan_item() for item in experiment.load.profiles)
    env = {
        "ABSERVE_CONFIG": config_path,
        "ABSERVE_MODEL": experiment.model.id,
        "ABSERVE_MODEL_REVISION": experiment.model.revision,
        "ABSERVE_SERVED_MODEL_NAME": experiment.model.served_name,
        "VLLM_SERVER_ARGS": shlex.join(render_args(experiment.server.args)),
        "ABSERVE_LOAD_PLAN": plan,
        "ABSERVE_LOAD_USERS": str(experiment.load.users),
        "ABSERVE_POLICY": experiment.policy,
        "COMPOSE_PROFILES": NOISE_FLOOR_PROFILE if "a2" in experiment.arms else "",
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
