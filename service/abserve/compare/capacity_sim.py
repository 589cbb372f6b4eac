"""A simulated capacity stage: two queues fed the same arrivals, searched and judged as for real.

What the knee and the gates can resolve for a given budget is a property of the method, not of
vLLM: ``simulate_stage`` runs ``capacity_search.next_rate`` and ``capacity_gates.judge_capacity``
on two first-come first-served servers with gamma service times of mean ``1 / mu`` (``SHAPE``) (one
per arm), fed one Poisson or constant arrival schedule (the same for both arms, and the same
uniform draws for both arms' service times: as paired as the real stage). A request meets the
SLO when its end-to-end time is within ``e2e_s``; one still running ``drain_s`` after the last
arrival never finishes. ``benchmarks/capacity.py`` and the unit tests use it. Pure (seeded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from abserve.compare.capacity import ArmStep, CapacityFinding, StepRecord
from abserve.compare.capacity_gates import judge_capacity
from abserve.compare.capacity_search import CapacityConfig, next_rate

SHAPE = 8.0  # service times: gamma, coefficient of variation 1/sqrt(SHAPE) (a batching server's)


def arrivals(rate: float, horizon: float, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in ``[0, horizon)``."""
    if kind == "constant":
        return np.arange(0.0, horizon, 1.0 / rate)
    gaps = rng.exponential(1.0 / rate, size=int(rate * horizon * 2 + 20))
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    return times[times < horizon]


def fifo_ends(times: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Completion times of one first-come first-served server."""
    ends = np.empty_like(times)
    free = 0.0
    for i, (t, s) in enumerate(zip(times, service, strict=True)):
        free = max(free, t) + s
        ends[i] = free
    return ends


def simulate_step(index: int, rate: float, mus: Mapping[str, float], cap: CapacityConfig,
                  rng: np.random.Generator, tokens: int = 24) -> StepRecord:
    """One step: both arms fed the same arrivals, their service times from the same draws."""
    times = arrivals(rate, cap.step_s, cap.arrivals, rng)
    draws = rng.gamma(SHAPE, 1.0 / SHAPE, size=len(times))
    cut = cap.step_s + cap.drain_s
    keep = times >= cap.warmup_s
    arms: dict[str, ArmStep] = {}
    for arm, mu in mus.items():
        ends = fifo_ends(times, draws / mu)
        done = (ends <= cut)[keep]
        e2e = (ends - times)[keep]
        limit = cap.slo.e2e_s if cap.slo.e2e_s is not None else np.inf
        met = done & (e2e <= limit)
        arms[arm] = ArmStep(met=met.astype(int).tolist(), finished=done.astype(int).tolist(),
                            tokens=[tokens] * int(keep.sum()))
    return StepRecord(index=index, rate=rate, window_s=cap.step_s - cap.warmup_s, arms=arms)


def simulate_stage(cap: CapacityConfig, mu_baseline: float, mu_candidate: float,
                   seed: int = 0) -> tuple[CapacityFinding, dict[str, Any]]:
    """The whole stage on simulated arms ``a`` (baseline) and ``b``: its finding and record."""
    rng = np.random.default_rng(seed)
    mus = {"a": mu_baseline, "b": mu_candidate}
    record: dict[str, Any] = {"rules": cap.rules().model_dump(mode="json"), "baseline": "a",
                              "candidate": "b", "looks": cap.max_steps, "seed": seed, "steps": []}
    finding = judge_capacity(record)
    while True:
        tested = {arm: {s.rate: s.arms[arm].holds for s in finding.steps} for arm in mus}
        rate, why = next_rate(tested, cap) if finding.steps else next_rate({}, cap)
        if rate is None:
            record["stop_reason"] = why
            break
        if len(record["steps"]) >= cap.max_steps:
            record["stop_reason"] = "max_steps reached"
            break
        step = simulate_step(len(record["steps"]), rate, mus, cap, rng)
        record["steps"].append(step.model_dump(mode="json"))
        finding = judge_capacity(record)
        if all(g.outcome in ("pass", "fail") for g in finding.gates):
            record["stop_reason"] = "every capacity gate decided"
            break
    return judge_capacity(record), record
