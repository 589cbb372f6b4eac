"""The capacity stage's settings and its adaptive choice of the next offered rate.

``CapacityConfig`` is the experiment config's ``capacity:`` block (off unless given): the
SLO and gates (``CapacityRules``), the open-loop arrivals (Poisson or constant, seeded: the
schedule never depends on the answers), the rate search, each step's length, warm-up and
drain, and the stage's budget.

``next_rate`` chooses the next step from what the steps so far showed (``holds`` per arm and
rate): start at ``start_rate``; while an arm has not broken, grow by ``growth`` (up to
``max_rate``); an arm that broke at the lowest rate sends the search down (to ``min_rate``);
then bisect (geometric mean) the widest bracket ``[h, f)`` of either arm until every bracket is
within ``resolution``. It returns the rate or why the search is over. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from abserve.compare.capacity import CapacityGateRule, CapacityRules, Slo, bracket


class CapacityConfig(BaseModel):
    """``capacity:``: a capacity stage after the latency load, on the same arms."""

    model_config = ConfigDict(extra="forbid")
    slo: Slo
    attainment: float = Field(default=0.9, gt=0.0, le=1.0)
    goodput: CapacityGateRule = CapacityGateRule()
    throughput: CapacityGateRule = CapacityGateRule(critical=False)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    bootstrap: int = Field(default=400, ge=50, le=10_000)
    # the traffic: one of the load's profiles (default: the first), its ``set:`` overrides kept
    profile: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)  # over the profile's own ``set:`` (dotted keys)
    arrivals: Literal["poisson", "constant"] = "poisson"
    seed: int = 0
    # Locust users (at least): a step gets enough that every arrival of the step and its drain could
    # be in flight at once (``users_for``), so lateness is the generator's, never a user shortage
    users: int = Field(default=64, ge=1, le=4096)
    start_rate: float = Field(gt=0)
    growth: float = Field(default=1.5, gt=1.0, le=4.0)
    resolution: float = Field(default=0.1, gt=0.0, le=1.0)  # bracket f/h within 1 + resolution
    min_rate: float = Field(default=0.01, gt=0)
    max_rate: float = Field(default=1000.0, gt=0)
    max_steps: int = Field(default=10, ge=2, le=64)
    step_s: float = Field(default=60.0, gt=0)  # arrivals are sent for this long per step
    warmup_s: float = Field(default=10.0, ge=0)  # arrivals before this are sent, not judged
    drain_s: float = Field(default=30.0, gt=0)  # after the last arrival; then what runs is cut
    pause_s: float = Field(default=2.0, ge=0)  # between steps: the arms idle before the next
    max_lateness_s: float = Field(default=0.25, gt=0)  # the generator's p95 lateness allowed
    budget_s: float = Field(default=600.0, gt=0)  # the stage's wall time

    @model_validator(mode="after")
    def _check(self) -> CapacityConfig:
        if self.warmup_s >= self.step_s:
            raise ValueError("capacity.warmup_s must be shorter than capacity.step_s")
        if not self.min_rate <= self.start_rate <= self.max_rate:
            raise ValueError("capacity: min_rate <= start_rate <= max_rate is required")
        if self.slo.e2e_s is not None and self.slo.e2e_s > self.drain_s:
            raise ValueError("capacity.drain_s must be at least slo.e2e_s: a request arriving last "
                             "must have the time to meet the SLO before the step is cut")
        return self

    def rules(self) -> CapacityRules:
        return CapacityRules(slo=self.slo, attainment=self.attainment, confidence=self.confidence,
                             bootstrap=self.bootstrap, goodput=self.goodput, throughput=self.throughput)

    def users_for(self, rate: float) -> int:
        """Locust users for a step at ``rate``: none of its arrivals waits for a free user."""
        return min(4096, max(self.users, math.ceil(rate * (self.step_s + self.drain_s)) + 8))

    @property
    def step_cost_s(self) -> float:
        """Wall time of one step: arrivals, drain, pause, and the load process's start (~5 s)."""
        return self.step_s + self.drain_s + self.pause_s + 5.0

    def expected_cost(self) -> str:
        """What ``abserve check`` and the run's start say the stage costs."""
        steps = min(self.max_steps, max(1, int(self.budget_s // self.step_cost_s)))
        return (f"capacity stage: up to {steps} rate steps of {self.step_cost_s:.0f} s "
                f"({self.step_s:.0f} s of {self.arrivals} arrivals from {self.start_rate:g}/s, "
                f"{self.warmup_s:.0f} s warm-up, {self.drain_s:.0f} s drain), at most "
                f"{self.budget_s:.0f} s after the latency load")


def _round(rate: float) -> float:
    """Three significant digits: rates a person can read and repeat."""
    return float(f"{rate:.3g}")


def next_rate(tested: Mapping[str, Mapping[float, bool]], cap: CapacityConfig) -> tuple[float | None, str]:
    """The next offered rate, or None and why the search is over. ``tested``: per arm, rate ->
    whether that arm held there (every arm tested at the same rates)."""
    rates = sorted(next(iter(tested.values())).keys()) if tested else []
    if not rates:
        return cap.start_rate, "start"
    brackets = {arm: bracket(rates, [held[r] for r in rates]) for arm, held in tested.items()}
    broke_low = [arm for arm, (h, _) in brackets.items() if h is None]
    if broke_low:
        lower = _round(rates[0] / cap.growth)
        if lower < cap.min_rate:
            return None, (f"SLO unmet at the lowest rate ({rates[0]:.3g}/s, min_rate {cap.min_rate:g}) "
                          f"by arm {', '.join(broke_low)}: no knee below it")
        return lower, "down"
    if any(f is None for _, f in brackets.values()):
        higher = _round(rates[-1] * cap.growth)
        if higher > cap.max_rate:
            return None, f"held up to max_rate ({cap.max_rate:g}/s): no knee below it"
        return higher, "grow"
    return _narrow(brackets, rates, cap)


def _narrow(brackets: Mapping[str, tuple[float | None, float | None]], rates: Sequence[float],
            cap: CapacityConfig) -> tuple[float | None, str]:
    widths = {arm: f / h for arm, (h, f) in brackets.items() if h and f}
    arm = max(widths, key=lambda a: widths[a])
    if widths[arm] <= 1 + cap.resolution + 1e-9:
        return None, f"every knee bracketed within {cap.resolution:.0%}"
    h, f = brackets[arm]
    assert h is not None
    assert f is not None
    mid = _round(math.sqrt(h * f))
    if mid in rates or not h < mid < f:
        return None, f"the rate grid cannot split [{h:.3g}, {f:.3g}) further"
    return mid, f"narrow {arm}"


def steps_to_resolve(brackets: Mapping[str, tuple[float | None, float | None]],
                     cap: CapacityConfig) -> int:
    """Steps the search still needs to bracket every knee within ``resolution`` (what a budget
    that decides would have to hold more, when the intervals follow the brackets)."""
    total = 0
    for h, f in brackets.values():
        if h is None or f is None:
            total += 2  # a grow or a step down, then a narrowing at least
            continue
        ratio = math.log(f / h) / math.log(1 + cap.resolution)
        total += max(0, math.ceil(math.log2(ratio))) if ratio > 1 else 0
    return total
