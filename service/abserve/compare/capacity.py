"""Capacity: per rate step SLO attainment and goodput, each arm's knee, the paired capacity gates.

The capacity stage (``abserve.runs.capacity_stage``) sends both arms the same open-loop arrivals
at a sequence of offered rates; each step's requests are kept per arm in arrival order
(``StepRecord``), so the k-th row of every arm is the same request. A request *meets the SLO*
when it finished and its TTFT, time per output token and end-to-end latency are within the
limits (DistServe's goodput); an unfinished request (cut at the step's end) never does.

Per arm and step: attainment (met / offered, Clopper-Pearson interval), goodput (met per
second of the measured window), output tokens/s of finished requests, finished vs offered and
queue growth ((offered - finished) per second). A step *holds* for an arm when its attainment
reaches the target and the arm finished at least that share (it kept up).

The knee of an arm is the highest offered rate at which it holds: it lies between ``h``, the
highest tested rate below which every tested rate held, and ``f``, the first tested rate above
``h`` that did not. That bracket is all the data say without a model; the point estimate
interpolates attainment in log rate between them. Its interval is a paired bootstrap over the
requests of every step (the same requests resampled for both arms): the ``alpha/2`` quantile
of the resampled ``h`` and the ``1 - alpha/2`` quantile of the resampled ``f``, so it covers
both the grid's resolution and which steps held by chance. ``alpha`` is split over the looks the
stage may take (Bonferroni), so stopping at any step keeps the stated confidence.

Gates, with the verdict's vocabulary: ``capacity.goodput`` compares the knees (candidate /
baseline, interval from the same replicates); ``capacity.throughput`` the output tokens/s of
the highest step where both arms were saturated (neither held). Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from abserve.compare.latency import RequestLatency
from abserve.compare.model import Outcome
from abserve.compare.stats.paired import clopper_pearson


class Slo(BaseModel):
    """The per-request service-level objective (seconds; None: not limited)."""

    model_config = ConfigDict(extra="forbid")
    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)
    e2e_s: float | None = Field(default=None, gt=0)

    def met(self, lat: RequestLatency | None) -> bool:
        """Whether a finished request's latencies are all within the limits."""
        if lat is None or lat.e2e is None:
            return False
        limits = ((self.ttft_s, lat.ttft), (self.tpot_s, lat.tpot), (self.e2e_s, lat.e2e))
        return all(limit is None or (value is not None and value <= limit) for limit, value in limits)

    def describe(self) -> str:
        parts = [f"{name} <= {limit * 1000:.0f} ms" for name, limit in
                 (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("e2e", self.e2e_s)) if limit]
        return ", ".join(parts) or "no limit"


class CapacityGateRule(BaseModel):
    """One capacity gate: the relative loss allowed (candidate / baseline >= 1 - allowed)."""

    model_config = ConfigDict(extra="forbid")
    allowed_relative: float = Field(default=0.10, ge=0.0, lt=1.0)
    critical: bool = True


class CapacityRules(BaseModel):
    """How capacity is judged: the SLO, the attainment target, the gates and the intervals."""

    model_config = ConfigDict(extra="forbid")
    slo: Slo
    attainment: float = Field(default=0.9, gt=0.0, le=1.0)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    bootstrap: int = Field(default=400, ge=50, le=10_000)
    goodput: CapacityGateRule = CapacityGateRule()
    throughput: CapacityGateRule = CapacityGateRule(critical=False)


class ArmStep(BaseModel):
    """One arm's requests of one step, in arrival order (row k of every arm: the same request)."""

    met: list[int]
    finished: list[int]
    tokens: list[int]
    # finished before the step's arrivals ended: the output delivered within the window, what
    # saturation throughput counts (empty in records made before it was kept: ``finished``)
    in_window: list[int] = Field(default_factory=list)

    @property
    def delivered(self) -> list[int]:
        return self.in_window or self.finished


class StepRecord(BaseModel):
    """One rate step as measured: the offered rate, the measured window and every arm's rows."""

    index: int
    rate: float
    window_s: float
    lateness_p95_s: float | None = None  # the load generator's own lateness against its plan
    arms: dict[str, ArmStep]

    @property
    def offered(self) -> int:
        return len(next(iter(self.arms.values())).met) if self.arms else 0


class ArmStepStats(BaseModel):
    offered: int
    met: int
    finished: int
    attainment: float
    attainment_low: float
    attainment_high: float
    goodput: float  # SLO-met requests per second of the window
    tokens_per_s: float  # output tokens of the requests that finished within the window
    # (offered - finished within the window) per second: the backlog left when arrivals ended
    queue_growth: float
    holds: bool


class StepSummary(BaseModel):
    index: int
    rate: float
    window_s: float
    lateness_p95_s: float | None = None
    arms: dict[str, ArmStepStats]


class Knee(BaseModel):
    """An arm's knee: ``estimate`` (None: not bracketed) in [low, high] (None: unbounded)."""

    arm: str
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    held_to: float | None = None  # h: the highest rate below which every tested rate held
    broke_at: float | None = None  # f: the first tested rate above h that did not hold
    note: str = ""


class CapacityGate(BaseModel):
    name: str
    critical: bool
    outcome: Outcome
    reason: str
    estimate: float | None = None  # candidate / baseline - 1
    low: float | None = None
    high: float | None = None
    allowed_relative: float = 0.0


class CapacityFinding(BaseModel):
    """What the report shows of the capacity stage; ``report.json``'s ``capacity``."""

    baseline: str
    candidate: str
    slo: str
    attainment_target: float
    confidence: float
    steps: list[StepSummary] = Field(default_factory=list)
    knees: dict[str, Knee] = Field(default_factory=dict)
    gates: list[CapacityGate] = Field(default_factory=list)
    stop_reason: str = ""
    sentence: str = ""


def arm_step_stats(arm: ArmStep, window_s: float, target: float, confidence: float) -> ArmStepStats:
    """One arm's numbers at one step."""
    n, met, done = len(arm.met), sum(arm.met), sum(arm.finished)
    ci = clopper_pearson(met, n, confidence)
    attainment = met / n if n else 0.0
    tokens = sum(t for t, f in zip(arm.tokens, arm.delivered, strict=True) if f)
    return ArmStepStats(
        offered=n, met=met, finished=done, attainment=attainment, attainment_low=ci.low,
        attainment_high=ci.high, goodput=met / window_s, tokens_per_s=tokens / window_s,
        queue_growth=(n - sum(arm.delivered)) / window_s, holds=holds(met, done, n, target))


def holds(met: float, finished: float, n: int, target: float) -> bool:
    """A step holds for an arm: attainment reaches the target and it finished that share."""
    return n > 0 and met >= target * n - 1e-9 and finished >= target * n - 1e-9


def bracket(rates: Sequence[float], held: Sequence[bool]) -> tuple[float | None, float | None]:
    """``(h, f)``: the highest rate up to which every tested rate held, and the first rate above
    it that did not (None: none held / none broke). ``rates`` ascending."""
    h: float | None = None
    for rate, ok in zip(rates, held, strict=True):
        if not ok:
            return h, rate
        h = rate
    return h, None


def interpolated_knee(h: float, f: float, a_h: float, a_f: float, target: float) -> float:
    """Where attainment crosses ``target`` between ``h`` and ``f``, linear in log rate."""
    if a_h <= a_f:
        return math.sqrt(h * f)
    share = min(max((a_h - target) / (a_h - a_f), 0.0), 1.0)
    return min(max(math.exp(math.log(h) + share * (math.log(f) - math.log(h))), h), f)


def merged_steps(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """Steps ordered by rate, two steps at one rate pooled (their rows and windows added)."""
    by_rate: dict[float, StepRecord] = {}
    for step in sorted(steps, key=lambda s: (s.rate, s.index)):
        seen = by_rate.get(step.rate)
        if seen is None:
            by_rate[step.rate] = step.model_copy(deep=True)
            continue
        seen.window_s += step.window_s
        for name, arm in step.arms.items():
            mine = seen.arms[name]
            mine.met += arm.met
            mine.finished += arm.finished
            mine.tokens += arm.tokens
    return list(by_rate.values())


def order_stat(values: np.ndarray, q: float) -> float:
    """The ``q`` quantile as an order statistic (no interpolation, so infinities stay whole)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def looks_alpha(confidence: float, looks: int) -> float:
    """Two-sided alpha of each look's intervals: ``1 - confidence`` split over ``looks``."""
    return (1.0 - confidence) / max(looks, 1)


class Replicates:
    """Paired bootstrap replicates of every step's requests: per arm, ``(h, f)`` per replicate
    (NaN where unbounded) and the tokens/s of each step."""

    def __init__(self, steps: Sequence[StepRecord], arms: Sequence[str], target: float,
                 count: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.rates = np.array([s.rate for s in steps])
        self.held: dict[str, np.ndarray] = {a: np.zeros((count, len(steps)), bool) for a in arms}
        self.tokens: dict[str, np.ndarray] = {a: np.zeros((count, len(steps))) for a in arms}
        for j, step in enumerate(steps):
            n = step.offered
            idx = rng.integers(0, n, size=(count, n)) if n else np.zeros((count, 0), int)
            for a in arms:
                met = np.asarray(step.arms[a].met, float)[idx].sum(axis=1)
                done = np.asarray(step.arms[a].finished, float)[idx]
                toks = np.asarray(step.arms[a].tokens, float)[idx]
                delivered = np.asarray(step.arms[a].delivered, float)[idx]
                self.held[a][:, j] = (n > 0) & (met >= target * n - 1e-9) & (
                    done.sum(axis=1) >= target * n - 1e-9)
                self.tokens[a][:, j] = (toks * delivered).sum(axis=1) / step.window_s

    def brackets(self, arm: str) -> tuple[np.ndarray, np.ndarray]:
        """Per replicate ``h`` (0 where no rate held) and ``f`` (inf where none broke)."""
        held = self.held[arm]
        ok_prefix = np.cumprod(held, axis=1).astype(bool)
        count = ok_prefix.sum(axis=1)
        rates = np.concatenate([[0.0], self.rates, [math.inf]])
        return rates[count], rates[count + 1]


def knee_of(arm: str, steps: Sequence[StepRecord], stats: Sequence[ArmStepStats],
            reps: Replicates, target: float, alpha: float) -> Knee:
    """One arm's knee: bracket, interpolated estimate and bootstrap interval."""
    rates = [s.rate for s in steps]
    h, f = bracket(rates, [s.holds for s in stats])
    hs, fs = reps.brackets(arm)
    low, high = order_stat(hs, alpha / 2), order_stat(fs, 1 - alpha / 2)
    knee = Knee(arm=arm, held_to=h, broke_at=f, low=low or None,
                high=None if math.isinf(high) else high)
    if h is None:
        knee.note = f"SLO unmet at the lowest rate tested ({rates[0]:.3g}/s): the knee is below it"
    elif f is None:
        knee.note = f"held at every rate tested, up to {h:.3g}/s: the knee is at least that"
    else:
        a = {s.rate: st.attainment for s, st in zip(steps, stats, strict=True)}
        knee.estimate = interpolated_knee(h, f, a[h], a[f], target)
    return knee


def ratio_outcome(estimate: float, low: float, high: float, allowed: float) -> tuple[Outcome, str]:
    """Classify candidate / baseline - 1 against the allowed relative loss."""
    span = f"{estimate:+.1%} [{low:+.1%}, {high:+.1%}]" if math.isfinite(high) else \
        f"{estimate:+.1%} [{low:+.1%}, unbounded]"
    limit = f"allowed loss {allowed:.0%}"
    if low >= -allowed:
        return "pass", f"{span}: whole interval within the {limit}"
    if high < -allowed:
        return "fail", f"{span}: whole interval beyond the {limit}"
    if estimate < -allowed:
        return "marginal", f"{span}: estimate beyond the {limit}, interval crosses it"
    return "inconclusive", f"{span}: interval reaches beyond the {limit}"
