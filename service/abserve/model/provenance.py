"""The run's provenance as typed records: ``RunInfo.provenance`` and what it holds.

Provenance was a free-form ``dict[str, object]``, written and read in a dozen modules, the
readers picking it apart with ``isinstance`` checks. These models name every key abserve
writes, with the type it writes, so a reader gets ``run.provenance.blocks[0].neighbours``.

Two promises keep the stores and reports of earlier versions working:

- the JSON is unchanged. A record writes only the keys that were given (or changed since):
  a run whose provenance never had ``blocks`` does not grow ``"blocks": []``. Field order is
  the order ``abserve run`` writes its keys in.
- nothing is lost. Every model keeps keys it does not know (``extra="allow"``) and writes them
  back as they were: a store written by a newer abserve (or by hand, or by a test) keeps its
  extra keys when an older one updates the run (``Store.update_run`` rewrites the whole
  provenance). No key is free-form by design; extras exist for that compatibility only.

Who writes what: ``abserve.runs.provenance.run_provenance`` (versions, hashes, seeds, host,
load plan, blocks), the orchestrator (``sequential``, ``arm_death``, ``load_stop``, ``load_seen``,
each block's ``neighbours`` and ``prefix_cache``), ``abserve.runs.combine`` (GPU rotation blocks,
``combined_from``), ``run_provenance`` also
each arm as configured (``arm_configs``) and the accepted release a baseline came from
(``accepted_baseline``, ``abserve.ledger.baseline``),
the compose target (``arm_environment``: each arm's worker settings; ``load``, how a load
ended, in stores of earlier compose runs), ``Store.resume_run`` (``router_restarts``) and the
router when it creates the run
(what the launcher knew at the start: ``policy``, ``policy_file``, ``policy_sha256``; a later
update that carries no policy keeps them: ``Store.update_run``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class ProvenanceRecord(BaseModel):
    """A provenance record: unknown keys kept, and only the keys that were given written."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {key: value for key, value in dumped.items() if self._written(key)}

    def _written(self, key: str) -> bool:
        """An extra key, a key given, or a default changed in place (a list appended to)."""
        field = type(self).model_fields.get(key)
        if field is None or key in self.model_fields_set:
            return True
        return bool(getattr(self, key) != field.get_default(call_default_factory=True))


class CoreLoad(ProvenanceRecord):
    """One of the arms' CPUs over a block: shares of its wall time (``arms/neighbours.py``)."""

    busy: float = 0.0
    arms: float = 0.0
    foreign: float = 0.0  # busy minus the arms': threads outside the arms' process trees
    foreign_threads: int = 0  # foreign threads that ran there >= 1 ms
    top: list[tuple[str, float]] = Field(default_factory=list)  # (command, share), busiest first


class ArmLoad(ProvenanceRecord):
    """One arm's server processes over a block: CPU time, run-queue wait, threads seen."""

    cpu_s: float = 0.0
    wait_s: float = 0.0
    threads: int = 0


class BlockNeighbours(ProvenanceRecord):
    """Foreign load on the arms' cores in one block; empty when fewer than two samples."""

    seconds: float | None = None
    cores: dict[str, CoreLoad] = Field(default_factory=dict)  # CPU number (as text) -> its load
    arms: dict[str, ArmLoad] = Field(default_factory=dict)


class PrefixCacheCounts(ProvenanceRecord):
    """An arm's prefix cache over a block: prompt tokens looked up in it and tokens found
    (vLLM's ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` counters, read from the
    arm's ``/metrics`` before and after the block: ``abserve.launch.cache_metrics``)."""

    queries: int = 0
    hits: int = 0


class BlockRecord(ProvenanceRecord):
    """One block of a run (``RunInfo.provenance.blocks``): when it ran and where each arm ran.

    ``abserve run`` writes ``rotation``, ``requests``, ``pinned`` and ``neighbours``; a GPU
    rotation's merged run (``abserve combine``) writes ``run_id`` (the block's own run)."""

    index: int | None = None
    rotation: int | None = None
    run_id: str | None = None
    placement_label: str | None = None
    placement: dict[str, list[int] | str] = Field(default_factory=dict)  # CPUs, or a GPU's label
    started_at: float | None = None
    ended_at: float | None = None
    requests: int | None = None
    pinned: dict[str, dict[str, int]] = Field(default_factory=dict)  # arm -> threads, off_placement
    neighbours: BlockNeighbours | None = None
    # arm -> its prefix cache's queries and hits in this block; only arms whose server counted
    # any (a server without a prefix cache, or without metrics, leaves the block without it)
    prefix_cache: dict[str, PrefixCacheCounts] = Field(default_factory=dict)


class LookRecord(ProvenanceRecord):
    """One look of the sequential loop: requests sent and seconds taken so far, each gate's outcome."""

    round: int = 0
    requests: int = 0
    seconds: float = 0.0
    gates: dict[str, str] = Field(default_factory=dict)


class SequentialRecord(ProvenanceRecord):
    """What ``abserve run``'s sequential loop did (``runs/rounds.py``)."""

    budget: dict[str, Any] = Field(default_factory=dict)  # the config's BudgetConfig, dumped
    rounds: int = 0
    requests: int = 0
    stop_reason: str = ""
    decided: bool = False
    looks: list[LookRecord] = Field(default_factory=list)


class ArmDeathRecord(ProvenanceRecord):
    """An arm found dead during the run (``arms/watch.py``)."""

    arm: str | None = None
    cause: str | None = None
    log_line: str | None = None
    at: float | None = None
    reason: str | None = None


class LoadStopRecord(ProvenanceRecord):
    """A load ``abserve run`` sent that stopped before its end (``runs/load_plan.py``): at its
    error-rate limit (``exit_code`` 6), a lost load worker (7), else 3; ``reason`` says which
    profile and why, and the run is judged INVALID with it."""

    profile: str | None = None
    stop_reason: str | None = None
    exit_code: int = 3
    reason: str | None = None


class LoadSeenRecord(ProvenanceRecord):
    """The load's own records against the store (``runs/load_seen.py``): answers the clients
    received in full (``seen``, each with the router's request id), how many of those are
    stored, and the first few request ids that are not."""

    seen: int = 0
    stored: int = 0
    missing: int = 0
    without_id: int = 0  # answers received in full without the router's request id header
    first_missing: list[str] = Field(default_factory=list)


class HostFacts(ProvenanceRecord):
    """The machine the run ran on."""

    machine: str | None = None
    cpus: int | None = None
    memory_gib: float | None = None
    processor: str | None = None
    gpu: str | None = None


class RouterRestart(ProvenanceRecord):
    """One restart of the router within the run (``Store.resume_run``)."""

    at: float | None = None  # Unix time the restarted router reopened the run
    previous_status: str = "unknown"  # "completed" or "interrupted"
    exchanges_before: int | None = None


class RunProvenance(ProvenanceRecord):
    """``RunInfo.provenance``: what produced the run (the arms' own provenance is ``RunInfo.arms``)."""

    abserve_version: str | None = None
    git_commit: str | None = None
    vllm_version: str | None = None
    torch_version: str | None = None
    experiment: str | None = None
    config_sha256: str | None = None
    # ``ABSERVE_CONFIG_OVERLAY``'s file when one replaced sections of the config: path, sha256
    config_overlay: dict[str, str] | None = None
    policy_sha256: str | None = None  # of the policy file (``policy_file``)
    # The policy the run is judged with, arm roles included, recorded as the run is created
    # (``abserve run``: the router's ``run_provenance`` setting), so every interim look,
    # ``abserve watch`` and ``abserve report`` judge with it (``abserve.report.locate``).
    policy: dict[str, Any] | None = None
    policy_file: str | None = None  # where ``policy`` was read from, as the config named it
    traffic_sha256: dict[str, str] = Field(default_factory=dict)  # profile -> its file's sha256
    # abserve run: path, served_name, identity_sha256; compose: the model id and revision.
    model: dict[str, Any] = Field(default_factory=dict)
    seeds: dict[str, int] = Field(default_factory=dict)
    load_plan: list[dict[str, Any]] = Field(default_factory=list)  # the config's load items, dumped
    host: HostFacts | None = None
    blocks: list[BlockRecord] = Field(default_factory=list)
    block_design: dict[str, Any] = Field(default_factory=dict)  # the config's blocks section, dumped
    recorded_at: float | None = None
    sequential: SequentialRecord | None = None
    arm_death: ArmDeathRecord | None = None
    load_stop: LoadStopRecord | None = None  # abserve run: a load stopped early (exit 6 or 7)
    # What the load saw against what was stored; absent where no load records existed.
    load_seen: LoadSeenRecord | None = None
    arm_environment: dict[str, dict[str, str]] = Field(default_factory=dict)  # compose: worker env
    load: dict[str, Any] | None = None  # how the load ended (earlier compose runs' stores)
    router_restarts: list[RouterRestart] = Field(default_factory=list)
    combined_from: list[str] = Field(default_factory=list)  # abserve combine: the block runs
    # Each arm as the experiment configured it (``ArmConfig.recorded``): what ``abserve accept``
    # keeps so an arm ``from: accepted`` starts the same build again (``abserve.ledger``).
    arm_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # The accepted release an arm ``from: accepted`` ran: {name, run_id, arm, config_name}.
    accepted_baseline: dict[str, Any] | None = None
    # The capacity stage (``abserve.runs.capacity_stage``): rules, arms, every step's rows.
    capacity: dict[str, Any] | None = None
