"""Neighbours for the arms' cores (issue 34), for ``tests/integration/test_neighbours_vllm.py`` and
``benchmarks/neighbours.py``.

- ``busy_process(cpu)``: one process spinning on ``cpu`` (case a; case c on the other core).
- ``busy_servers(servers, cpu, model)``: running vLLM servers of "another run" moved onto
  ``cpu``, each kept busy by a client thread sending multimodal chat requests back to back
  (case b), as a second abserve run would; ``tests/integration/test_neighbours_vllm.py`` uses
  the test session's pair.
- ``other_run(cpu, out)``: the same with two servers of its own (the tiny LLaVA of the
  selftest, the same server flags), for ``benchmarks/neighbours.py``.
- ``selftest_latency(out)``: ``abserve run configs/selftest/latency.yaml`` (the self-test's slow
  mutant: 5 ms per lookup call on arm ``slow``) as a subprocess; returns its ``report.json``.
- ``verdict_of(report)``: what the issue's proof reads: the ``tpot.hl`` line, the injected
  effect (telemetry: extra time per lookup call x calls per step) and the neighbour facts.

Every process started here is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from abserve.arms.server import VllmServer

REPO = Path(__file__).resolve().parents[2]
LATENCY_CONFIG = REPO / "configs" / "selftest" / "latency.yaml"


@contextlib.contextmanager
def busy_process(cpu: int) -> Iterator[int]:
    """One Python process spinning on ``cpu``; yields its PID."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, [cpu]))
    try:
        yield hog.pid
    finally:
        hog.kill()
        hog.wait()


def _keep_busy(url: str, model: str, stop: threading.Event, sent: list[int],
               begin: Callable[[], bool]) -> None:
    from abserve.arms.probe import probe_body

    body = probe_body(model, images=8) | {"max_tokens": 32}
    while not stop.is_set() and not begin():
        stop.wait(0.5)
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                client.post(f"{url}/v1/chat/completions", json=body)
                sent[0] += 1


def router_up(run_dir: Path) -> Callable[[], bool]:
    """Whether the run writing to ``run_dir`` has its router up (its arms started and proven)."""
    log = run_dir / "logs" / "router.log"
    return lambda: log.is_file() and "router up" in log.read_text(errors="replace")


@dataclass
class Busy:
    """The busy servers' PIDs, and how many requests they answered so far."""

    pids: list[int]
    sent: list[int] = field(default_factory=lambda: [0])  # shared with the client threads


@contextlib.contextmanager
def busy_servers(servers: Sequence[VllmServer], cpu: int, model: str,
                 begin: Callable[[], bool] = lambda: True) -> Iterator[Busy]:
    """Running vLLM ``servers`` moved, every thread, onto ``cpu`` and each kept busy by a client
    thread sending multimodal chat requests back to back, as a second abserve run would, from
    the moment ``begin()`` holds (e.g. ``router_up``: the judged run's own start-up is not what
    is measured); yields their PIDs and answered requests. On exit the clients stop and each
    server goes back onto its own CPUs (every CPU for a server that has none)."""
    from abserve.arms.pinning import pin_tree

    stop = threading.Event()
    busy = Busy([s.process.pid for s in servers if s.process is not None])
    clients: list[threading.Thread] = []
    try:
        for pid in busy.pids:
            pin_tree(pid, (cpu,))
        for server in servers:
            thread = threading.Thread(target=_keep_busy, args=(server.url, model, stop, busy.sent, begin),
                                      daemon=True)
            thread.start()
            clients.append(thread)
        yield busy
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=60)
        for server, pid in zip(servers, busy.pids, strict=False):
            pin_tree(pid, server.cpus or sorted(os.sched_getaffinity(0)))


@contextlib.contextmanager
def other_run(cpu: int, out: Path, servers: int = 2) -> Iterator[list[int]]:
    """``servers`` vLLM servers of their own (the self-test's tiny LLaVA and server flags)
    pinned to ``cpu``, each busy with back-to-back requests (``busy_servers``); yields their
    PIDs once all answer ``/health``."""
    from abserve.arms.arm_servers import arm_spec
    from abserve.arms.server import VllmServer, start_servers, stop_servers
    from abserve.config import load_experiment
    from abserve.runs.orchestrator import ensure_model

    config = load_experiment(LATENCY_CONFIG)
    model = ensure_model(config)
    spec = arm_spec(config, model, "a")
    started = [VllmServer(f"other-{i}", spec, "linear", out / f"other-{i}.log", out / f"tel-{i}",
                          cpus=(cpu,)) for i in range(servers)]
    try:
        start_servers(started, pin_when_ready=True)  # start-up spread, then pinned to cpu
        with busy_servers(started, cpu, spec.served_model_name) as busy:
            yield busy.pids
    finally:
        stop_servers(started)


def selftest_latency(out: Path, lock: Path, timeout_s: float = 900) -> tuple[int, dict[str, Any], str]:
    """Run the self-test's latency experiment (arm ``a`` against the slow mutant); return its
    exit code, its ``report.json`` and the tail of its output."""
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(lock)}
    done = subprocess.run([sys.executable, "-m", "abserve", "run", str(LATENCY_CONFIG), "--out", str(out)],
                          cwd=REPO, env=env, text=True, capture_output=True, timeout=timeout_s, check=False)
    tail = (done.stdout + done.stderr)[-4000:]
    path = out / "report.json"
    report = json.loads(path.read_text()) if path.is_file() else judged_from_store(out)
    return done.returncode, report, tail


def judged_from_store(run_dir: Path, default_neighbours: bool = False) -> dict[str, Any]:
    """The latency experiment's judgment straight from its store (a vs slow, the selftest
    policy; with ``default_neighbours`` the built-in neighbour rule instead of the selftest's,
    which only reports foreign load), e.g. for a run whose report could not be written."""
    from abserve.compare.policy import ArmRoles, NeighbourRule, load_policy
    from abserve.report.judging import judge_with_evidence
    from abserve.store import Store
    from abserve.store.latest import latest_run

    stored = latest_run(run_dir / "abserve.db", exchanges=False)
    if stored is None:
        return {}
    policy = load_policy(REPO / "configs" / "policy" / "selftest.yaml")
    update: dict[str, object] = {"arms": ArmRoles(baseline="a", candidate="slow", floor=None)}
    if default_neighbours:
        update["neighbours"] = NeighbourRule()
    policy = policy.model_copy(update=update)
    with Store.open(f"sqlite:///{(run_dir / 'abserve.db').resolve()}") as store:
        judgment, _ = judge_with_evidence(store, stored.run.run_id, policy)
    return judgment.model_dump(mode="json")


def injected_s(judgment: dict[str, Any], baseline: str = "a", mutant: str = "slow") -> float | None:
    """The per-token effect the mutant injected, from both arms' telemetry (as the selftest)."""
    from abserve.model.records import LookupTelemetry
    from abserve.runs.selftest_checks import injected_effect

    arms = judgment.get("arms") or {}
    if baseline not in arms or mutant not in arms:
        return None
    effect = injected_effect(LookupTelemetry.model_validate(arms[baseline]["telemetry"]),
                             LookupTelemetry.model_validate(arms[mutant]["telemetry"]), None)
    return None if effect is None else effect.expected_s


def verdict_of(report: dict[str, Any], metric: str = "tpot.hl") -> dict[str, Any]:
    """The proof's reading of one report: verdict, the metric's line, the injected effect,
    whether the interval contains it, and the neighbour facts."""
    judgment = report.get("judgment", report)
    line: dict[str, Any] = next((m for m in judgment.get("metrics", []) if m.get("name") == metric), {})
    injected = injected_s(judgment)
    low, high = line.get("low"), line.get("high")
    contains = None if None in (injected, low, high) else low <= injected <= high  # type: ignore[operator]
    return {"verdict": judgment.get("verdict"), "outcome": line.get("outcome"),
            "estimate": line.get("estimate"), "low": low, "high": high, "injected": injected,
            "contains": contains,
            "reason": line.get("reason", ""), "invalid": judgment.get("invalid_reasons", []),
            "neighbours": judgment.get("neighbours", []), "n": line.get("n"),
            "blocks": (judgment.get("provenance") or {}).get("blocks", [])}


def wait(seconds: float) -> None:
    time.sleep(seconds)
