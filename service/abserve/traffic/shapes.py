"""Load shapes: when each request is sent, as a pure arrival plan.

``closed``: a fixed number of users, each sending its next request as soon as the previous one
finished (no plan; concurrency is the knob). Open-loop shapes send on a clock whatever the
server's latency: ``constant`` (every 1/rate s), ``poisson`` (exponential gaps, seeded),
``step`` (the rate climbs in equal steps up to ``rate``) and ``sweep`` (a list of rates, each
held for an equal share, with a drain gap between levels so each level is measured on its own).

A plan is bounded by a request count or a duration, never both open, so every run stops by
itself. Worker ``w`` of ``W`` takes arrivals ``w, w+W, ...``, so the union of all workers
follows the global plan.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

ShapeName = Literal["closed", "constant", "poisson", "step", "sweep"]
SHAPES: tuple[ShapeName, ...] = ("closed", "constant", "poisson", "step", "sweep")


@dataclass(frozen=True)
class Arrival:
    """One planned send: seconds after the start, and the target rate it belongs to."""

    offset: float
    rate: float


def levels_for(shape: ShapeName, rate: float, steps: int = 4,
               sweep_rates: list[float] | None = None) -> list[float]:
    """The rates an open-loop shape holds, in order."""
    if rate <= 0 and not sweep_rates:
        raise ValueError(f"shape {shape!r} needs a positive --rate")
    if shape in ("constant", "poisson"):
        return [rate]
    if shape == "step":
        if steps < 1:
            raise ValueError("step shape needs at least one step")
        return [rate * (k + 1) / steps for k in range(steps)]
    if shape == "sweep":
        rates = sweep_rates or [rate * f for f in (0.25, 0.5, 1.0, 2.0)]
        if any(r <= 0 for r in rates):
            raise ValueError("sweep rates must be positive")
        return list(rates)
    raise ValueError(f"shape {shape!r} has no arrival plan")


def plan_arrivals(shape: ShapeName, rate: float, *, count: int | None = None,
                  duration: float | None = None, seed: int = 0, steps: int = 4,
                  sweep_rates: list[float] | None = None,
                  drain_s: float = 1.0) -> list[Arrival] | None:
    """The global arrival plan, or ``None`` for closed-loop users."""
    if shape == "closed":
        return None
    if (count is None) == (duration is None):
        raise ValueError("give exactly one of a request count or a duration")
    rates = levels_for(shape, rate, steps, sweep_rates)
    rng = random.Random(seed)
    gap = drain_s if shape == "sweep" else 0.0
    arrivals: list[Arrival] = []
    start = 0.0
    for k, level in enumerate(rates):
        if count is not None:
            n = count // len(rates) + (1 if k < count % len(rates) else 0)
            times = _times(shape, level, rng, n=n)
            span = len(times) / level
        else:
            if duration is None:
                raise ValueError("give a request count or a duration")
            span = duration / len(rates)
            times = _times(shape, level, rng, horizon=span)
        arrivals += [Arrival(start + t, level) for t in times]
        start += span + gap
    return arrivals


def _times(shape: ShapeName, rate: float, rng: random.Random, *, n: int | None = None,
           horizon: float | None = None) -> list[float]:
    times: list[float] = []
    t = 0.0
    while (n is not None and len(times) < n) or (horizon is not None and t < horizon):
        times.append(t)
        t += rng.expovariate(rate) if shape == "poisson" else 1.0 / rate
    return times


def shard_arrivals(plan: list[Arrival], shard: int, shards: int) -> list[Arrival]:
    """This worker's part of a global plan."""
    return plan[shard::shards]


def planned_duration(plan: list[Arrival] | None) -> float:
    """Seconds from the first to the last planned send (0 for closed-loop)."""
    return max((a.offset for a in plan), default=0.0) if plan else 0.0


