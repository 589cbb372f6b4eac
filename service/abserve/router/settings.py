"""Router settings: arms, limits, deadlines, storage and security, from YAML or env.

One ``RouterSettings`` object says everything the router does; ``load_settings`` reads
it from a YAML file (``abserve router --config FILE``), and ``ABSERVE_ROUTER_*``
environment variables override fields. The key stays out of files as ``ABSERVE_API_KEY``,
the variable every abserve client reads (``ABSERVE_ROUTER_API_KEY`` wins when both are set).
The settings refuse to exist without an API key unless ``dev_mode: true`` is set
explicitly: authentication fails closed.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from abserve.model.provenance import RunProvenance
from abserve.model.roles import Role, baselines, resolve_roles
from abserve.router.affinity import checked_header_names

ROUTER_KEY_ENV = "ABSERVE_ROUTER_API_KEY"
SHARED_KEY_ENV = "ABSERVE_API_KEY"  # abserve.traffic.corpus.API_KEY_ENV: what clients send
SeedPolicy = Literal["fixed", "none"]
SeededSampling = Literal["allow", "refuse"]
ClientWaitsFor = Literal["primary", "all_arms"]
Acknowledge = Literal["stored", "before_store"]


class Deadlines(BaseModel):
    """Per-arm time limits in seconds; each arm is timed out on its own."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is refused with its path

    connect_s: float = Field(default=5.0, gt=0)
    # send → first token (big prefills); for a request that is not streamed, send → the
    # answer (vLLM sends it whole), so a hung arm is given up after this, not after total_s
    first_token_s: float = Field(default=120.0, gt=0)
    idle_s: float = Field(default=30.0, gt=0)  # longest silence between two chunks after that
    total_s: float = Field(default=600.0, gt=0)  # send → end of the whole exchange


class PoolLimits(BaseModel):
    """Connection pool of each arm's client (``upstream.ArmClient``): at most this many
    connections per arm; idle ones are kept for reuse until ``keepalive_expiry_s``."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is refused with its path

    max_connections: int = Field(default=128, ge=1)
    keepalive_expiry_s: float = Field(default=4.0, gt=0)  # under uvicorn's (and vLLM's) 5 s


class ArmSettings(BaseModel):
    """One upstream vLLM server."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is refused with its path

    url: str
    role: Role | None = None  # filled in by RouterSettings as an experiment does (abserve.model.roles)
    api_key: SecretStr | None = None  # sent to this upstream; never the client's key
    deadlines: Deadlines = Deadlines()

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("arm url must start with http:// or https://")
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            raise ValueError("arm url must not hold credentials (set the arm's api_key)")
        if parts.query or parts.fragment:
            raise ValueError("arm url must not have a query or fragment")
        return url.rstrip("/")


def _new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class RouterSettings(BaseSettings):
    """Everything the router needs; see the module docstring."""

    model_config = SettingsConfigDict(env_prefix="ABSERVE_ROUTER_", extra="forbid")

    arms: dict[str, ArmSettings]
    primary: str = "a"  # the arm whose stream the client receives
    run_id: str = Field(default_factory=_new_run_id)
    run_dir: Path = Path("runs/router")
    database_url: str | None = None  # default: sqlite:///<run_dir>/abserve.db
    # The store's heartbeat period (and retry delay after a failed commit); records are
    # committed as soon as they come, many per transaction (store/writer.py).
    flush_interval_s: float = Field(default=0.5, gt=0, le=1.0)
    # A router restarted under the same run_id reopens its stopped run (same arms, URLs,
    # primary and request settings) instead of refusing it as existing (router/run_open.py);
    # the restart is recorded in the run and stated in the report.
    resume: bool = False
    # What the launcher knows of the run when it starts, recorded with the run as it is
    # created (router/run_open.py): ``abserve run`` gives the policy the run is judged with,
    # so a watch judges every look as the run does. Not part of the stored config.
    run_provenance: RunProvenance = Field(default_factory=RunProvenance)
    # The process that started this router (``abserve run`` sets its own pid): when it is
    # gone (killed), the router drains and marks its run interrupted, never completed
    # (``abserve.base.parent_watch``). None: no watch (a router started by hand or by compose).
    # Not part of the stored config.
    parent_pid: int | None = Field(default=None, ge=1)

    host: str = "127.0.0.1"
    port: int = Field(default=8100, ge=0, le=65535)
    # The clients' key (every abserve client reads ABSERVE_API_KEY); ABSERVE_ROUTER_API_KEY, the
    # router's own name for it, wins when both are set; `api_key:` in the YAML file otherwise.
    api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices(ROUTER_KEY_ENV, SHARED_KEY_ENV, "api_key"))
    dev_mode: bool = False  # explicit opt-out of the API key requirement

    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_images: int = Field(default=64, ge=0)
    allowed_media_hosts: list[str] = Field(default_factory=list)
    # Session-affinity headers (the load's x-session-id; production-stack's router keys its
    # session routing on a header such as x-user-id, Dynamo's on x-dynamo-session-id): a
    # client's value is forwarded unchanged to every arm and recorded in the exchange's tags
    # under the header's name (router/affinity.py).
    session_headers: list[str] = Field(
        default_factory=lambda: ["x-session-id", "x-user-id", "x-dynamo-session-id"], max_length=8)
    max_concurrency: int = Field(default=256, ge=1)  # clients waiting for or reading an answer
    # Exchanges whose client has its whole answer while another arm still runs (a slow or
    # hung shadow, bounded by its own deadlines): past this many, new requests are refused,
    # so shadow work cannot grow without limit; it holds no client's admission slot.
    max_shadow_backlog: int = Field(default=256, ge=1)
    retry_after_s: int = Field(default=1, ge=0)
    # A client's connection (router/http_limits.py): the request head may take at most this
    # many bytes and seconds (431 / 408, connection closed); the body must arrive within
    # body_timeout_s (408) while its request holds an admission slot, and at least
    # min_body_bytes_per_s x body_rate_window_s bytes of it in every body_rate_window_s (408
    # otherwise, router/body_pace.py; 0: no floor): a body that stops arriving holds its slot
    # and buffer for at most two windows, not the whole body timeout.
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=60.0, gt=0)
    min_body_bytes_per_s: int = Field(default=64 * 1024, ge=0)
    body_rate_window_s: float = Field(default=5.0, gt=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)
    # When the client's response ends: once every arm has answered ("all_arms", the default:
    # a client that paces itself on its answers, as every closed-loop load does, then keeps
    # every arm at its own concurrency), or with the primary's answer ("primary": the other
    # arms run as shadows and can build a queue the client never sees; on purpose only).
    client_waits_for: ClientWaitsFor = "all_arms"
    # When the client gets the final bytes of its answer ([DONE], the end of a JSON body):
    # once the exchange's record is committed to the store ("stored", the default: nothing a
    # client received in full is lost to a crash of the router), or without waiting for the
    # store ("before_store": opt-in, recorded with the run and stated in its report; the one
    # client_waits_for: primary needs, as the record needs every arm).
    acknowledge: Acknowledge = "stored"
    # SQLite only: fsync every commit (synchronous=FULL), so a stored record also survives a
    # power cut or OS crash; off by default (a commit survives a crash of the router anyway).
    store_fsync: bool = False

    top_logprobs: int = Field(default=5, ge=0, le=20)  # k asked of arms if the client asks none
    seed_policy: SeedPolicy = "fixed"  # "fixed": same seed to every arm when the client gave none
    default_seed: int = 0
    # "refuse": 400 for requests vLLM would sample (a seeded sample kills vLLM on CPU);
    # "allow": forward them with the same seed to every arm (see router/augment.py).
    seeded_sampling: SeededSampling = "refuse"
    request_usage: bool = True  # ask arms for the usage chunk; hidden unless the client asked
    store_prompt_text: bool = False
    # Prompt-logprob probe (router/prompt_sample.py): this fraction of exchanges, chosen by
    # request fingerprint, also asks every arm for the prompt logprobs with top-k candidates.
    prompt_logprobs_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    prompt_logprobs_k: int = Field(default=0, ge=0, le=20)
    pool: PoolLimits = PoolLimits()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment first, so a deployment can override a YAML file (and hold the key)."""
        return env_settings, init_settings, file_secret_settings

    @field_validator("session_headers")
    @classmethod
    def _header_names(cls, names: list[str]) -> list[str]:
        return checked_header_names(names)

    @field_validator("allowed_media_hosts")
    @classmethod
    def _lower_hosts(cls, hosts: list[str]) -> list[str]:
        return [h.strip().lower().rstrip(".") for h in hosts if h.strip()]

    @model_validator(mode="after")
    def _check(self) -> RouterSettings:
        if not self.arms:
            raise ValueError("at least one arm is required")
        if self.primary not in self.arms:
            raise ValueError(f"primary arm is not among arms {sorted(self.arms)}")
        roles = resolve_roles({name: arm.role for name, arm in self.arms.items()}, fallback=self.primary)
        if len(found := baselines(roles)) != 1:
            raise ValueError(f"exactly one arm must be the baseline (role: baseline, or the arm named 'a' "
                             f"or else the primary without a role); found {found or 'none'}")
        for name, arm in self.arms.items():
            arm.role = roles[name]
        if self.client_waits_for == "primary" and self.acknowledge == "stored":
            raise ValueError("client_waits_for: primary answers before the record of every arm "
                             "can be stored: set acknowledge: before_store with it")
        if self.api_key is None and not self.dev_mode:
            raise ValueError("api_key is required (or set dev_mode: true explicitly)")
        if self.api_key is not None and len(self.api_key.get_secret_value()) < 16:
            raise ValueError("api_key must be at least 16 characters")
        return self

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.run_dir / 'abserve.db').resolve()}"

    def public_config(self) -> dict[str, Any]:
        """The settings as stored with the run: secrets and credentials left out."""
        data = self.model_dump(mode="json", exclude={"api_key", "database_url", "run_provenance",
                                                      "parent_pid"})
        for arm in data["arms"].values():
            arm.pop("api_key", None)
        return data


class SettingsError(ValueError):
    """Settings refused; the message names fields and problems, never a value."""


def describe(exc: ValidationError) -> str:
    """A ``ValidationError`` as ``field: problem`` lines without the values it was given
    (pydantic's own text quotes them: a key, or a database URL with its password)."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(p) for p in error["loc"]) or "settings"
        lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)


def load_settings(path: Path | str, **overrides: Any) -> RouterSettings:
    """Read settings from a YAML file; environment variables and ``overrides`` win.
    Raises ``SettingsError`` (a ``ValueError``) whose message holds no setting's value."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.MarkedYAMLError as exc:  # its text quotes the offending line
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SettingsError(f"{path}: not valid YAML{where}") from None
    except yaml.YAMLError:
        raise SettingsError(f"{path}: not valid YAML") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{path}: expected a mapping at the top level")
    router_section = raw.get("router", raw)
    if not isinstance(router_section, dict):
        raise SettingsError(f"{path}: expected a mapping under 'router'")
    try:
        return RouterSettings(**{**router_section, **overrides})
    except ValidationError as exc:
        raise SettingsError(describe(exc)) from None
