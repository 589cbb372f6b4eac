"""Lookup telemetry: what each vLLM process proved it ran, and how much work it did.

The plugin (``abserve.vllm_plugin``) keeps counters in every vLLM process it is loaded
into and a background thread writes them, about twice a second, to
``$ABSERVE_TELEMETRY_DIR/<pid>.json`` (atomic rename, so readers never see half a file).
The orchestrator reads the directory back to decide whether an arm *proved* its lookup
mode: a process must have patched a runner module with the expected mode AND actually
executed that lookup inside the runner's gather step. An environment variable alone is
no proof.

Stdlib only: this module is imported inside vLLM server processes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

TELEMETRY_SCHEMA = 1
FLUSH_INTERVAL_S = 0.5


@dataclass
class Counters:
    """Work counted in one process; only ever grows while the server runs."""

    lookup_calls: int = 0
    items_examined: int = 0
    lookup_ns: int = 0
    gather_calls: int = 0
    gather_ns: int = 0
    faults_injected: int = 0  # test-only mutants (abserve.vllm_plugin.mutants)
    items_per_request: dict[str, int] = field(default_factory=dict)  # bucket -> lookup calls
    examined_per_request: dict[str, int] = field(default_factory=dict)  # bucket -> items examined

    def add_lookup(self, num_items: int, examined: int, elapsed_ns: int) -> None:
        self.lookup_calls += 1
        self.items_examined += examined
        self.lookup_ns += elapsed_ns
        bucket = items_bucket(num_items)
        self.items_per_request[bucket] = self.items_per_request.get(bucket, 0) + 1
        self.examined_per_request[bucket] = self.examined_per_request.get(bucket, 0) + examined


def items_bucket(num_items: int) -> str:
    """Power-of-two bucket label for a request's item count: 0, 1, 2, 4, 8, ..."""
    return "0" if num_items <= 0 else str(1 << (num_items.bit_length() - 1))


@dataclass
class ProcessTelemetry:
    """One process's record: identity, what was patched, and its counters."""

    pid: int
    process_name: str
    role: str
    mode: str | None
    scope: str
    vllm_version: str | None
    patched: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    mutant: str | None = None  # a test-only fault (abserve.vllm_plugin.mutants); part of the proven mode
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    schema: int = TELEMETRY_SCHEMA
    argv: list[str] = field(default_factory=list)  # the process's command line
    environment: dict[str, str] = field(default_factory=dict)  # RECORDED_ENV, at the last flush

    @property
    def effective_mode(self) -> str | None:
        """The lookup mode this process runs, ``<lookup>+<mutant>`` for a mutant."""
        if self.mode is None or self.mutant is None:
            return self.mode
        return f"{self.mode}+{self.mutant}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessTelemetry:
        payload = dict(data)
        payload["counters"] = Counters(**payload.get("counters", {}))
        return cls(**payload)


# Settings that decide whether two arms can be held to equal outputs, recorded as each process
# sees them at every flush: vLLM changes some of them itself after start (under
# VLLM_BATCH_INVARIANT=1 it sets CUBLAS_WORKSPACE_CONFIG, ":16:8" on Hopper and Blackwell),
# so what a config asked for is not necessarily what ran.
RECORDED_ENV = ("VLLM_BATCH_INVARIANT", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
                "VLLM_USE_V2_MODEL_RUNNER", "PYTHONHASHSEED", "HF_HUB_OFFLINE")


def recorded_environment() -> dict[str, str]:
    """The ``RECORDED_ENV`` variables that are set in this process now."""
    return {key: os.environ[key] for key in RECORDED_ENV if key in os.environ}


def process_role(process_name: str) -> str:
    """Guess the vLLM role from the multiprocessing name vLLM gives its processes."""
    if "Worker" in process_name:
        return "worker"
    if process_name.startswith("EngineCore"):
        return "engine_core"
    if process_name == "MainProcess":
        return "api_server"
    return "other"


class TelemetryWriter:
    """Writes a process's telemetry file periodically from a daemon thread."""

    def __init__(self, directory: Path, record: ProcessTelemetry) -> None:
        self.directory = directory
        self.record = record
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> Path:
        return self.directory / f"{self.record.pid}.json"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.flush()
        self._thread = threading.Thread(target=self._run, name="abserve-telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush()

    def flush(self) -> None:
        self.record.updated_at = time.time()
        self.record.environment = recorded_environment()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record.to_json(), sort_keys=True))
        os.replace(tmp, self.path)

    def stop(self) -> None:
        self._stop.set()
        self.flush()


def read_telemetry(directory: Path) -> list[ProcessTelemetry]:
    """Every process record in a telemetry directory, oldest first."""
    records = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            records.append(ProcessTelemetry.from_json(json.loads(path.read_text())))
        except (ValueError, TypeError, OSError):
            continue  # a foreign or truncated file proves nothing
    return sorted(records, key=lambda r: r.started_at)


@dataclass
class Proof:
    """Whether an arm's server proved that it runs the expected lookup."""

    expected: str | None
    proven: str | None
    detail: str
    patched: list[str]
    vllm_version: str | None
    totals: Counters

    @property
    def ok(self) -> bool:
        return self.proven is not None and self.proven == self.expected


def add_counts(total: object, more: object, names: Iterable[str]) -> None:
    """Add ``more``'s counters named ``names`` into ``total``: numbers summed, histograms
    (bucket -> count) merged. The one sum of lookup work: a server's ``Counters`` over its
    processes, and a rotated run's ``records.LookupTelemetry`` over its blocks."""
    for name in names:
        mine, theirs = getattr(total, name), getattr(more, name)
        if isinstance(mine, dict):
            for bucket, count in theirs.items():
                mine[bucket] = mine.get(bucket, 0) + count
        else:
            setattr(total, name, mine + theirs)


def sum_counters(records: list[ProcessTelemetry]) -> Counters:
    """Counters summed over processes (histograms merged)."""
    total = Counters()
    for record in records:
        add_counts(total, record.counters, [f.name for f in fields(Counters)])
    return total


def counters_since(now: Counters, then: Counters) -> Counters:
    """What a process counted after ``then`` was read (every counter only grows)."""
    grown: dict[str, Any] = {}
    for f in fields(Counters):
        after, before = getattr(now, f.name), getattr(then, f.name)
        grown[f.name] = ({k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
                         if isinstance(after, dict) else after - before)
    return Counters(**grown)


def since(records: list[ProcessTelemetry], baseline: list[ProcessTelemetry]) -> list[ProcessTelemetry]:
    """Each process's record less what it had counted in ``baseline`` (an earlier read of the
    same folder): one run's work on a server that served runs before it."""
    before = {record.pid: record.counters for record in baseline}
    return [replace(r, counters=counters_since(r.counters, before[r.pid])) if r.pid in before else r
            for r in records]


def prove_lookup(records: list[ProcessTelemetry], expected: str | None) -> Proof:
    """Decide what a server proved from its processes' telemetry.

    Proven mode M means: some process patched at least one runner module in mode M and
    ran the gather step with M's lookup inside it (gather_calls > 0, lookup_calls > 0),
    and no process ran any other mode.
    """
    patched = sorted({m for r in records for m in r.patched})
    version = next((r.vllm_version for r in records if r.vllm_version), None)
    totals = sum_counters(records)
    modes = {r.effective_mode for r in records}
    if not records:
        return Proof(expected, None, "no telemetry: plugin not loaded", [], None, totals)
    if modes == {None}:
        return Proof(expected, None, "plugin loaded but ABSERVE_MM_LOOKUP unset", [], version, totals)
    if len(modes - {None}) > 1:
        detail = f"processes disagree on the mode: {sorted(m for m in modes if m)}"
        return Proof(expected, None, detail, patched, version, totals)
    runners = [r for r in records if r.patched and r.counters.gather_calls > 0]
    if not runners or not any(r.counters.lookup_calls > 0 for r in runners):
        detail = "mode set but no process ran the patched lookup inside the gather step yet"
        return Proof(expected, None, detail, patched, version, totals)
    mode = runners[0].effective_mode
    detail = (
        f"{mode}: {totals.lookup_calls} lookups in {totals.gather_calls} gather steps "
        f"by pid(s) {sorted(r.pid for r in runners)}"
    )
    return Proof(expected, mode, detail, patched, version, totals)
