"""Experiment configuration: what ``abserve run`` starts, sends and judges.

One YAML file (``configs/cpu-default.yaml``, ``configs/gpu-*.yaml``) names the model, the
server arguments every arm shares, the arms (``abserve.model.arms``: managed servers, external
endpoints or images; one baseline, any number of candidates and noise floors), router
overrides, the bounded load plan (traffic profiles one after another) and the policy.
Everything here is checked when the file loads, before any server starts: unknown keys,
router overrides (against the router's own settings), secrets written as literals. The
checks that need the machine (interpreters, endpoints, vLLM's own argument parser) are
``abserve.arms.arm_checks``. The CPU default builds its tiny model offline; GPU configs
name a hub model and are run by ``docker compose`` through ``abserve.deploy.compose_env``,
which reads this same schema.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from abserve.base.config_paths import rebase_experiment
from abserve.base.packaged import packaged, resolve_config
from abserve.base.yamlfile import read_mapping
from abserve.compare.capacity_search import CapacityConfig
from abserve.model.arms import ArgValue, ArmConfig, Lookup, ServerFlags
from abserve.model.placement import Order, is_balanced, plan_blocks
from abserve.model.roles import Role, baselines, resolve_roles
from abserve.traffic.remote import LoadWorkers
from abserve.traffic.sources.spec import FileOptions, FileSource, label_for
from abserve.vllm_plugin.mutants import V1_RUNNER_ONLY, V2_RUNNER_ENV

__all__ = ["ArgValue", "ArmConfig", "ExperimentConfig", "LoadItem", "Lookup", "Role", "load_experiment"]

# Router settings that ``abserve run`` sets itself for every run.
RUN_OWNED_ROUTER_KEYS = frozenset(
    {"run_id", "run_dir", "database_url", "host", "port", "api_key", "dev_mode", "parent_pid"})


class ModelConfig(BaseModel):
    """The served model: ``builder: tiny-llava`` builds it offline when missing; a hub model
    is ``id`` (and its pinned ``revision``) for compose, or a local ``path``."""

    model_config = ConfigDict(extra="forbid")
    builder: Literal["tiny-llava"] | None = "tiny-llava"
    path: Path = Path(".abserve/models/tiny-llava")
    id: str | None = Field(default=None, min_length=1)
    revision: str | None = None
    served_name: str = Field(default="tiny-llava", min_length=1)
    spec: dict[str, Any] = Field(default_factory=dict)  # TinyModelSpec overrides

    @model_validator(mode="before")
    @classmethod
    def _hub_model_is_not_built(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("id") and "builder" not in data:
            return {**data, "builder": None}
        return data


class ServerConfig(ServerFlags):
    """Server settings every arm shares (only the lookup mode differs between arms)."""

    model_config = ConfigDict(extra="forbid")
    max_model_len: int = 8192
    dtype: str = "float32"
    max_num_batched_tokens: int = 64
    max_images: int = 1024
    kv_cache_memory_bytes: int | None = 1 << 30
    enforce_eager: bool = True
    prefix_caching: bool = False
    lookup_scope: Literal["runner", "all"] = "runner"
    seed: int = 0
    startup_timeout_s: float = 300.0


class LoadItem(BaseModel):
    """One traffic profile, how many requests of it to send, and overrides of its knobs; or
    (``kind: file``) a traffic file (``abserve.traffic.sources``, docs/traffic-files.md),
    whose ``requests`` default to every line it sends and whose ``profile`` is its label."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["profile", "file"] = "profile"
    profile: str = Field("", pattern=r"^([A-Za-z0-9._/-]+)?$")
    requests: int = Field(0, ge=0)  # a file: 0 = every line it sends (set when the config loads)
    set: dict[str, Any] = Field(default_factory=dict)  # locustfile's --abserve-set, dotted keys
    file: FileOptions | None = None
    # set when the config loads (never read from the file): what the checked file sends, for
    # the run's provenance (requests, images, forced_greedy, seeded, skipped lines...)
    imported: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _kind(self) -> LoadItem:
        if self.kind == "profile":
            if not self.profile or self.requests < 1 or self.file is not None:
                raise ValueError("a profile item needs profile and requests > 0 (and no file)")
            return self
        if self.file is None or self.set:
            raise ValueError("a file item needs file: {path: ...} (and no set: overrides)")
        self.profile = self.profile or label_for(self.file.path)
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", self.profile):
            raise ValueError("a file item's profile (its label) is lowercase letters, digits, '-'")
        return self


def _host(name: object) -> str:
    """A media host as the router compares it (``RouterSettings.allowed_media_hosts``)."""
    return str(name).strip().lower().rstrip(".")


class LoadConfig(BaseModel):
    """The bounded load: traffic profiles sent one after another through the router."""

    model_config = ConfigDict(extra="forbid")
    users: int = Field(4, ge=1)
    seed: int = 0
    # Each block's load stops beyond this share of failures. Looser than the policy's
    # max_error_rate (abserve.base.limits: 0.02) on purpose: the policy judges the whole run's rate,
    # which a few failures in one block of it do not decide.
    max_error_rate: float = Field(0.2, ge=0.0, le=1.0)
    # closed: each user sends its next request when the client's answer (the primary arm's)
    # ends, so a non-primary arm may still be decoding then; constant/poisson at ``rate``
    # requests per second (open loop) leave every arm idle between requests when the rate is
    # low enough: the A/A' latency check needs that symmetry.
    shape: Literal["closed", "constant", "poisson"] = "closed"
    rate: float = Field(0.0, ge=0.0)
    profiles: list[LoadItem] = Field(min_length=1)
    # Locust workers on other hosts (``abserve load-worker --master HOST:PORT`` on each:
    # abserve.traffic.remote, docs/scale-out.md); the router then listens on ``bind``'s host
    workers: LoadWorkers | None = None
    # More router replicas of this run on other hosts (``abserve router --join --db URL
    # --run-id ID`` on each; abserve.router.replica): the load sends request k to router k mod n
    replicas: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rate_for_open_loop(self) -> LoadConfig:
        if self.shape != "closed" and self.rate <= 0:
            raise ValueError(f"shape {self.shape!r} needs rate > 0 (requests per second)")
        if self.workers is not None:
            _ = self.workers.reachable_host  # the router's address for the load hosts, or why not
            if self.users < self.workers.count:
                raise ValueError("load.users must be at least load.workers.count (a user per worker)")
        return self


class BlocksConfig(BaseModel):
    """Counterbalanced blocks (``abserve.runs.blocks``): the run is ``count`` blocks, each
    sending its share of every load profile; with ``cpu_sets`` the arms rotate through those
    CPU sets between blocks in ``order`` (``balanced``: ABBA; ``cyclic``: ABAB; ``fixed``: no
    swap, the naive design), re-pinned without a restart. Without ``cpu_sets`` each arm keeps
    its own ``cpus`` in every block. Every rotation must appear equally often.
    """

    model_config = ConfigDict(extra="forbid")
    count: int = Field(default=1, ge=1, le=256)
    order: Order = "balanced"
    cpu_sets: list[list[int]] | None = None
    settle_s: float = Field(default=1.0, ge=0.0, le=60.0)  # pause after re-pinning, before the block
    # Requests of the first profile sent before block 0, tagged block=warmup (match the
    # policy's warmup_requests so the judge's warm-up cut does not eat into block 0).
    warmup_requests: int = Field(default=0, ge=0, le=1000)

    @model_validator(mode="after")
    def _check_sets(self) -> BlocksConfig:
        if self.cpu_sets is None:
            return self
        if not self.cpu_sets or any(not s or min(s) < 0 or len(set(s)) != len(s) for s in self.cpu_sets):
            raise ValueError("blocks.cpu_sets: each set needs distinct, non-negative CPU numbers")
        if len({len(s) for s in self.cpu_sets}) != 1:
            raise ValueError("blocks.cpu_sets: every set must have the same size (equal shares)")
        return self


class BudgetConfig(BaseModel):
    """A sequential experiment (``abserve.runs.rounds``): load in rounds of one block per
    placement, judged after each; it stops when every critical gate is decided or when
    ``seconds`` (wall time of the whole run, servers' start included) or ``requests`` (sent,
    warm-up included) cannot fit another round. Each block sends ``requests / blocks.count``
    of every profile, so ``load`` and ``blocks`` set the size of a round, the budget how many.
    """

    model_config = ConfigDict(extra="forbid")
    seconds: float | None = Field(default=None, gt=0)
    requests: int | None = Field(default=None, ge=1)
    min_rounds: int = Field(default=1, ge=1)
    # A tail guard that looks guilty (open, its estimate beyond its allowance) holds the run past
    # ``seconds`` / ``requests`` until it decides or this many requests were sent (issue 58): a
    # stall on a few percent of requests needs two to three hundred pairs to be proven.
    tail_requests: int | None = Field(default=None, ge=1)


class ExperimentConfig(BaseModel):
    """A whole A/B experiment."""

    model_config = ConfigDict(extra="forbid")
    name: str
    model: ModelConfig = ModelConfig()
    server: ServerConfig = ServerConfig()
    arms: dict[str, ArmConfig]
    router: dict[str, Any] = Field(default_factory=dict)  # RouterSettings overrides, checked
    load: LoadConfig
    blocks: BlocksConfig = BlocksConfig()
    budget: BudgetConfig | None = None
    capacity: CapacityConfig | None = None  # a capacity stage after the load (runs/capacity_stage.py)
    policy: Path = Path("configs/policy/default.yaml")  # load_experiment: the packaged default
    # Set by ``abserve.ledger.baseline.resolve_accepted`` on an arm ``from: accepted``:
    # {name, run_id, arm, config_name}, for the run's provenance (``accepted_baseline``).
    _accepted_baseline: dict[str, str] | None = PrivateAttr(default=None)
    # The model runner when the config does not say (VLLM_USE_V2_MODEL_RUNNER): vLLM's choice
    # here (V1 on a CPU machine); ``abserve.deploy.compose_env`` sets V2, docker-compose.yml's default.
    v2_runner_default: ClassVar[bool] = False

    @model_validator(mode="after")
    def _check_arms(self) -> ExperimentConfig:
        if len(self.arms) < 2:
            raise ValueError("at least two arms are required: one baseline and one to compare with it")
        roles = resolve_roles({name: arm.role for name, arm in self.arms.items()})
        found = baselines(roles)
        if len(found) != 1:
            raise ValueError(f"exactly one arm must be the baseline (role: baseline, or the arm named "
                             f"'a' without a role); found {found or 'none'}")
        for name, arm in self.arms.items():
            arm.role = roles[name]
        images = [name for name, arm in self.arms.items() if arm.kind == "image"]
        built = [name for name, arm in self.arms.items() if arm.from_ is None]  # from: accepted: either
        if images and len(images) != len(built):
            raise ValueError(f"arms {images} are images (run by docker compose); the others are "
                             "not: an experiment runs all its arms one way")
        return self

    @model_validator(mode="after")
    def _check_mutant_runner(self) -> ExperimentConfig:
        """A mutant that needs the V1 runner (``V1_RUNNER_ONLY``) is refused under Model Runner V2,
        where it would inject nothing: a self-test that proves nothing."""
        for name, arm in self.arms.items():
            why = V1_RUNNER_ONLY.get(arm.mutant or "")
            runner = ({**self.server.env, **arm.env}.get(V2_RUNNER_ENV) or "").strip()  # empty: unset
            v2 = runner.lower() not in ("0", "false") if runner else type(self).v2_runner_default
            if why and v2:
                said = f"{V2_RUNNER_ENV}={runner}" if runner else f"{V2_RUNNER_ENV} unset: compose's default"
                raise ValueError(f"arm {name!r}: mutant {arm.mutant} needs the V1 model runner, not Model "
                                 f"Runner V2 ({said}): it {why}; set {V2_RUNNER_ENV}: \"0\" under server.env")
        return self

    @model_validator(mode="after")
    def _check_router(self) -> ExperimentConfig:
        """Router overrides are validated by the router's own settings now, not minutes into a run."""
        from abserve.router.settings import RouterSettings, describe

        owned = sorted(RUN_OWNED_ROUTER_KEYS & set(self.router))
        unknown = sorted(set(self.router) - set(RouterSettings.model_fields))
        if unknown:
            known = sorted(RouterSettings.model_fields)
            raise ValueError(f"router: unknown settings {unknown}; known: {known}")
        if owned and not self.compose:
            raise ValueError(f"router: {owned} are set by abserve run itself")
        primary = self.router.get("primary", self.baseline)
        if primary not in self.arms:
            raise ValueError(f"router.primary {primary!r} is not an arm (arms: {sorted(self.arms)})")
        arms = self.router.get("arms") or {name: {"url": "http://127.0.0.1:9"} for name in self.arms}
        try:
            RouterSettings.model_validate({**self.router, "arms": arms, "primary": primary, "dev_mode": True})
        except ValidationError as exc:
            raise ValueError(f"router: {describe(exc)}") from None
        return self

    @property
    def compose(self) -> bool:
        """Whether ``docker compose`` runs this experiment (its router names the arms' URLs)."""
        return "arms" in self.router

    @property
    def accepted_baseline(self) -> dict[str, str] | None:
        """The accepted release an arm ``from: accepted`` was resolved to (None: no such arm)."""
        return self._accepted_baseline

    def from_ledger(self) -> dict[str, ArmConfig]:
        """The arms still to take their build from the ledger (``from: accepted``)."""
        return {name: arm for name, arm in self.arms.items() if arm.from_ is not None}

    @property
    def baseline(self) -> str:
        return next(name for name, arm in self.arms.items() if arm.role == "baseline")

    def arms_with_role(self, role: Role) -> list[str]:
        return [name for name, arm in self.arms.items() if arm.role == role]

    @model_validator(mode="after")
    def _check_files(self) -> ExperimentConfig:
        """Every traffic file is read and checked against this run's router now, before any
        server starts (``abserve.traffic.sources.check_file``); a file item without
        ``requests`` sends every line that passes."""
        from abserve.traffic.sources import check_file

        names = [item.profile for item in self.load.profiles]
        for item in self.load.profiles:
            if item.kind == "file" and names.count(item.profile) > 1:
                raise ValueError(f"load item {item.profile!r} is named twice: a file item's label "
                                 "(profile:) tags its requests and must be its own")
        for item in self.load.profiles:
            if item.kind == "file":
                check = check_file(self.file_source(item))
                if check.sessions and self.router.get("client_waits_for") == "primary":
                    raise ValueError(f"{item.file.path if item.file else item.profile}: its "
                                     "sessions send turn k once turn k-1 has ended on every "
                                     "arm, which client_waits_for: primary does not wait for")
                item.requests = item.requests or check.requests
                item.imported = check.summary()
        return self

    def file_source(self, item: LoadItem, skip: int = 0) -> FileSource:
        """A file item as this run sends it: the router's limits and sampling rule, the media
        hosts router and arms both allow, the served model; from accepted request ``skip`` on."""
        if item.file is None:
            raise ValueError(f"load item {item.profile!r} is not a traffic file")
        router = self.router
        limits = {key: router[key] for key in ("max_body_bytes", "max_images", "seeded_sampling")
                  if key in router}
        checked = (item.imported or {}).get("requests")
        sessions = (item.imported or {}).get("sessions", 0)
        return FileSource(**item.file.model_dump(), model=self.model.served_name, label=item.profile,
                          allowed_media_hosts=tuple(self.media_hosts()), skip=skip, checked=checked,
                          checked_sessions=sessions,
                          max_context=self.server.max_model_len,
                          **{"max_images": self.server.max_images, **limits})

    def media_hosts(self) -> list[str]:
        """http(s) image hosts this run may send: the router's ``allowed_media_hosts`` that every
        arm's ``--allowed-media-domains`` also names (``server:`` args, the arm's own winning).
        An arm that names none allows none (abserve starts it with a domain that never
        resolves), and an external arm's flags are unknown, so it allows none either."""
        hosts = [_host(h) for h in self.router.get("allowed_media_hosts") or []]
        for arm in self.arms.values():
            named = {**self.server.args, **arm.args}.get("--allowed-media-domains")
            if arm.kind == "external" or not isinstance(named, str):
                return []
            hosts = [h for h in hosts if h == _host(named)]
        return hosts

    @model_validator(mode="after")
    def _check_blocks(self) -> ExperimentConfig:
        blocks = self.blocks
        if blocks.cpu_sets is not None:
            pinned = [name for name, arm in self.arms.items() if arm.cpus]
            if pinned:
                raise ValueError(f"arms {pinned} set cpus and blocks.cpu_sets rotates them: "
                                 "choose one")
            plan = plan_blocks(list(self.arms), blocks.cpu_sets, blocks.count, blocks.order)
            if not is_balanced(plan):
                raise ValueError(f"blocks.count={blocks.count} does not use every placement "
                                 f"equally often with {len(blocks.cpu_sets)} CPU sets")
        few = [item.profile for item in self.load.profiles if item.requests < blocks.count]
        if few:
            raise ValueError(f"profiles {few} have fewer requests than blocks ({blocks.count})")
        return self


Experiment = TypeVar("Experiment", bound=ExperimentConfig)


# A file whose top-level sections replace the config's own (after ``extends:``), for every
# reader of the config: a machine stand-in (the GPU journey test runs the documented GPU
# configs on the CPU engine with this machine's server flags and load) or a host's own site
# settings. The run's provenance names it (``config_overlay``).
OVERLAY_ENV = "ABSERVE_CONFIG_OVERLAY"


def config_overlay() -> Path | None:
    """The overlay file ``ABSERVE_CONFIG_OVERLAY`` names, if any."""
    named = os.environ.get(OVERLAY_ENV, "").strip()
    return Path(named) if named else None


def _overlaid(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each top-level section of the overlay (if one is named) replacing its own;
    a section the overlay sets to null is removed (the schema's default applies)."""
    overlay = config_overlay()
    if overlay is None:
        return data
    merged = {**data, **read_mapping(overlay, rebase=rebase_experiment)}
    return {key: value for key, value in merged.items() if value is not None}


class ConfigError(ValueError):
    """An experiment file refused; one ``field: problem`` line per error, never a value from it."""


def load_experiment(path: Path | str) -> ExperimentConfig:
    """Read and validate an experiment YAML file or packaged name (``abserve.base.packaged``;
    ``extends: OTHER.yaml`` allowed, paths in it relative to the file that names them); raises
    ``ConfigError`` whose message quotes no value of the file (it may hold secrets)."""
    return load_experiment_as(path, ExperimentConfig)


def load_experiment_as(path: Path | str, schema: type[Experiment]) -> Experiment:
    """``load_experiment`` with a stricter schema where a target needs one
    (``abserve.deploy.compose_env.ComposeExperiment``): the one reader of experiment files."""
    data = _overlaid(read_mapping(resolve_config(path), rebase=rebase_experiment))
    data.setdefault("policy", str(packaged("default", "policy")))
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        lines = []
        for error in exc.errors(include_url=False, include_input=False, include_context=False):
            where = ".".join(str(p) for p in error["loc"]) or "experiment"
            lines.append(f"{where}: {error['msg']}")
        raise ConfigError(f"{path}: " + "; ".join(lines)) from None
