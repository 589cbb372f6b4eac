"""Experiment configuration: what ``abserve run`` starts, sends and judges.

One YAML file (``configs/cpu-default.yaml``, ``configs/gpu-*.yaml``) names the model, the
server arguments every arm shares, the arms and the lookup each must prove, router
overrides, the bounded load plan (traffic profiles one after another) and the policy.
The CPU default builds its tiny model offline; GPU configs name a hub model and are run by
``docker compose`` through ``abserve.deploy.compose_env`` with the same load items.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from abserve.deploy.compose_env import ArgValue, LoadItem, render_args
from abserve.launch.blocks import Order, is_balanced, plan_blocks
from abserve.launch.server import ServerSpec
from abserve.yamlfile import read_mapping

Lookup = Literal["linear", "bisect"]
Role = Literal["baseline", "candidate", "noise_floor"]


class ModelConfig(BaseModel):
    """The served model; ``builder: tiny-llava`` builds it offline when missing."""

    model_config = ConfigDict(extra="forbid")
    builder: Literal["tiny-llava"] | None = "tiny-llava"
    path: Path = Path(".abserve/models/tiny-llava")
    served_name: str = "tiny-llava"
    spec: dict[str, Any] = Field(default_factory=dict)  # TinyModelSpec overrides


class ServerConfig(BaseModel):
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
    args: dict[str, ArgValue] = Field(default_factory=dict)  # further vLLM flags
    env: dict[str, str] = Field(default_factory=dict)

    def server_spec(self, model_path: Path, served_name: str) -> ServerSpec:
        return ServerSpec(
            model=str(model_path),
            served_model_name=served_name,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_images=self.max_images,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            enforce_eager=self.enforce_eager,
            prefix_caching=self.prefix_caching,
            seed=self.seed,
            lookup_scope=self.lookup_scope,
            extra_args=render_args(self.args),
            env=self.env,
            startup_timeout_s=self.startup_timeout_s,
        )


class ArmConfig(BaseModel):
    """One arm: the lookup its server must prove, its role, and optionally its CPUs.

    ``mutant`` turns the arm into a TEST-ONLY wrong build (``abserve.mutants``) that a
    report must catch; it is part of the mode the server proves (``linear+slow``).
    """

    model_config = ConfigDict(extra="forbid")
    lookup: Lookup
    role: Role = "baseline"
    cpus: list[int] | None = None
    mutant: Literal["drop-straddle", "slow", "embed-fault"] | None = None
    mutant_env: dict[str, str] = Field(default_factory=dict)  # ABSERVE_MUTANT_DELAY_US, ...

    @property
    def expected_mode(self) -> str:
        return self.lookup if self.mutant is None else f"{self.lookup}+{self.mutant}"

    def server_env(self) -> dict[str, str]:
        """Extra server environment of this arm (the mutant selection, if any)."""
        if self.mutant is None:
            return {}
        return {"ABSERVE_MUTANT": self.mutant, **self.mutant_env}


class LoadConfig(BaseModel):
    """The bounded load: traffic profiles sent one after another through the router."""

    model_config = ConfigDict(extra="forbid")
    users: int = Field(4, ge=1)
    seed: int = 0
    max_error_rate: float = 0.2
    # closed: each user sends its next request when the client's answer (the primary arm's)
    # ends, so a non-primary arm may still be decoding then; constant/poisson at ``rate``
    # requests per second (open loop) leave every arm idle between requests when the rate is
    # low enough: the A/A' latency check needs that symmetry.
    shape: Literal["closed", "constant", "poisson"] = "closed"
    rate: float = Field(0.0, ge=0.0)
    profiles: list[LoadItem] = Field(min_length=1)

    @model_validator(mode="after")
    def _rate_for_open_loop(self) -> LoadConfig:
        if self.shape != "closed" and self.rate <= 0:
            raise ValueError(f"shape {self.shape!r} needs rate > 0 (requests per second)")
        return self


class BlocksConfig(BaseModel):
    """Counterbalanced blocks (``abserve.launch.blocks``): the run is ``count`` blocks, each
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
    """A sequential experiment (``abserve.launch.rounds``): load in rounds of one block per
    placement, judged after each; it stops when every critical gate is decided or when
    ``seconds`` (wall time of the whole run, servers' start included) or ``requests`` (sent,
    warm-up included) cannot fit another round. Each block sends ``requests / blocks.count``
    of every profile, so ``load`` and ``blocks`` set the size of a round, the budget how many.
    """

    model_config = ConfigDict(extra="forbid")
    seconds: float | None = Field(default=None, gt=0)
    requests: int | None = Field(default=None, ge=1)
    min_rounds: int = Field(default=1, ge=1)


class ExperimentConfig(BaseModel):
    """A whole A/B experiment."""

    model_config = ConfigDict(extra="forbid")
    name: str
    model: ModelConfig = ModelConfig()
    server: ServerConfig = ServerConfig()
    arms: dict[str, ArmConfig]
    router: dict[str, Any] = Field(default_factory=dict)  # RouterSettings overrides
    load: LoadConfig
    blocks: BlocksConfig = BlocksConfig()
    budget: BudgetConfig | None = None
    policy: Path = Path("configs/policy/default.yaml")

    @model_validator(mode="after")
    def _check_arms(self) -> ExperimentConfig:
        if "a" not in self.arms or len(self.arms) < 2:
            raise ValueError("arm 'a' (the baseline) and at least one other arm are required")
        return self

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


def load_experiment(path: Path | str) -> ExperimentConfig:
    """Read and validate an experiment YAML file (``extends: OTHER.yaml`` allowed)."""
    return ExperimentConfig.model_validate(read_mapping(Path(path)))
