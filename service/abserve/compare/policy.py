"""The sign-off policy: what is measured, what change is allowed, and how sure we must be.

Loaded from ``configs/policy/*.yaml``, packaged as ``abserve/_configs/policy`` and addressable by
name (``gpu``; see ``configs/policy/default.yaml`` for every field explained). Unknown keys are
refused so a typo cannot silently loosen a gate.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from abserve.base.limits import MAX_ERROR_RATE
from abserve.base.packaged import PackagedError, resolve_config
from abserve.base.yamlfile import YamlFileError, read_mapping

Direction = Literal["increase", "decrease", "either"]
Statistic = Literal["hl", "p50", "p95", "p99"]
LatencyMetric = Literal["ttft", "tpot", "itl", "e2e"]
# How every gate is judged: ``sequential`` (``abserve.compare.judge_sequential``) or ``fixed``
# (``abserve.compare.judge_fixed``); ``abserve.compare.judge`` picks the path by it.
Mode = Literal["sequential", "fixed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArmRoles(_Strict):
    """Which arm is the reference, which is judged, and which measures the noise floor."""

    baseline: str = "a"
    candidate: str = "b"
    floor: str | None = "a2"


class MetricRule(_Strict):
    """One latency gate: ``candidate - baseline`` of ``statistic`` of ``metric``.

    The allowed change is ``max(allowed_relative * baseline value, allowed_absolute)``
    in the bad ``direction`` (seconds for ``allowed_absolute``).
    """

    metric: LatencyMetric
    statistic: Statistic = "hl"
    direction: Direction = "increase"
    allowed_relative: float = Field(default=0.05, ge=0.0)
    allowed_absolute: float = Field(default=0.0, ge=0.0)
    critical: bool = False

    @property
    def name(self) -> str:
        return f"{self.metric}.{self.statistic}"


class EqualityRule(_Strict):
    """How output differences count against the candidate."""

    mismatch_classes: tuple[Literal["drift", "close", "divergent"], ...] = (
        "drift",
        "close",
        "divergent",
    )
    drift_tolerance: float = Field(default=0.0, ge=0.0)
    drift_floor_quantile: float | None = Field(default=None, gt=0.0, le=1.0)
    allowed_excess_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    critical: bool = True
    # Sequential judgment: equality passes once the anytime-valid upper bound of the excess
    # mismatch rate is at most ``resolution`` (the smallest rate the run rules out).
    resolution: float = Field(default=0.10, gt=0.0, le=1.0)


class PlacementRule(_Strict):
    """How runs cut into counterbalanced blocks are judged (``abserve.compare.blocked``).

    With ``counterbalance`` an ``hl`` latency line of a run whose exchanges carry at least two
    placements is judged on the counterbalanced estimate (within blocks, averaged over
    placements) instead of all pairs pooled. Blocks with fewer than ``min_block_pairs`` pairs
    are left out. When the measured placement bias reaches ``max_bias_ratio`` times the
    line's threshold and the outcome would change if that bias had not cancelled, the line is
    ``inconclusive`` with advice.
    """

    counterbalance: bool = True
    min_block_pairs: int = Field(default=6, ge=2)
    max_bias_ratio: float = Field(default=0.5, ge=0.0)


class SequentialRule(_Strict):
    """How the anytime-valid gates judge at every look (``abserve.compare.sequential``): every
    gate of ``mode: sequential`` (``abserve.compare.judge_sequential``), and the strata gates of
    ``mode: fixed`` (looked at once).

    ``phi``: prior precision of the mixture (in units of the noise; 1 is the usual choice).
    ``look_every``: exchanges between looks when the exchanges carry no block tags.
    ``warmup``: ``auto`` cuts each arm's initial transient (MSER-5) on top of the fixed count.
    ``drift``: ``guard`` makes a gate whose difference moved by more than its allowance over
    the run ``unstable``; ``accept`` only reports the drift.
    ``unknown_placement_bias``: seconds per metric that an uncontrolled placement can add
    (measured on this kind of machine); a latency ``fail`` without controlled placement must
    exceed the allowance by this much.
    ``clip``: paired differences beyond this many robust sds of their median are winsorized
    (interference spikes; 0 keeps them).
    """

    phi: float = Field(default=1.0, gt=0.0)
    look_every: int = Field(default=16, ge=2)
    warmup: Literal["auto", "fixed"] = "auto"
    max_warmup_fraction: float = Field(default=0.5, gt=0.0, lt=1.0)
    drift: Literal["guard", "accept"] = "guard"
    unknown_placement_bias: dict[LatencyMetric, float] = Field(default_factory=dict)
    clip: float = Field(default=5.0, ge=0.0)
    # Percentile gates (p50/p95/p99): ``fixed`` judges them once with the paired bootstrap
    # (reported, never decisive); ``anytime`` with two-sample quantile confidence sequences
    # (``abserve.compare.quantile_cs``), so a proven tail regression fails the run at any look.
    # ``tails_required``: a critical tail gate must also pass before the run may pass; false
    # makes it a guard (it fails the run when proven, an open one blocks nothing): p99 cannot
    # be bounded above before ~400 requests per arm.
    # ``tail_design``: ``paired`` gates the p-quantile of each request's own slowdown beyond its
    # allowance (one sequence, full alpha; mixed traffic cancels in the pair); ``two-sample``
    # the difference of the arms' own p-quantiles (alpha/2 per arm, far wider on mixed traffic).
    tails: Literal["fixed", "anytime"] = "fixed"
    tails_required: bool = False
    tail_design: Literal["paired", "two-sample"] = "paired"
    # ``tail_watch``: a guard blocks a pass (open and critical) until it has judged this many
    # pairs, so a stall on a few percent of requests has shown before the shift gates can end the
    # run (72: a stall on 5% of requests misses all of them in 2.5% of runs). 0: never.
    tail_watch: int = Field(default=0, ge=0)


class NeighbourRule(_Strict):
    """Foreign load on the arms' cores (``abserve.compare.contamination``).

    ``abserve run`` records per block the share of each of the arms' CPUs' wall time that went to
    threads outside the arms' server process trees (``abserve.arms.neighbours``). When the
    worst core of the worst block exceeds ``max_foreign_share`` (None: never), ``action: unstable``
    makes every latency line ``unstable`` with the neighbours named (with ``keep_fails`` a fail
    stays a fail), ``action: invalid`` makes the run invalid. Equality is never affected.
    The run's own router and load generator count as foreign too (they float over every CPU).
    Default 0.5: more than half of an arms' core's time went to someone else; measured cases in
    benchmarks/placement.md, "Neighbours" (a busy process or another run's servers on the core:
    70-86%). A policy for a machine that is shared on purpose can raise it or set None.

    ``widen`` (seconds per metric): the largest bias foreign load on the arms' cores was measured
    to cause (benchmarks/placement.md, "Neighbours": a known 5.9-8.2 ms per output token read
    as +0.1 to +11.4 ms at 70-86% foreign, so up to 6.5 ms either way). Neighbours widen, they
    do not erase: a shift fail whose interval stays beyond its allowance plus this much is kept
    (its reason names the neighbours); only what the bias could explain becomes ``unstable``.
    A metric without a measured bias has no widening: every fail of it is ``unstable``.
    """

    max_foreign_share: float | None = Field(default=0.5, ge=0.0, le=1.0)
    action: Literal["unstable", "invalid"] = "unstable"
    keep_fails: bool = False
    widen: dict[str, float] = Field(default_factory=lambda: {"tpot": 0.0065})


class StratumRule(_Strict):
    """A stratum of the traffic judged on its own (``abserve.compare.strata``).

    Members: exchanges whose ``tag`` (``items`` = images per request, ``profile``, or any
    exchange tag) is in ``[min, max)`` (numbers) or one of ``values`` (text). Each of
    ``metrics`` gets a shift gate with the allowance ``max(allowed_relative * stratum baseline,
    allowed_absolute)``, anytime-valid at ``alpha / m`` (Bonferroni over the m stratum gates).
    ``required: false`` makes a critical stratum gate a guard: a proven regression fails the
    run, an open interval does not keep it from passing. ``why``: the reason, for the reader.
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.+-]+$")
    tag: str = "items"
    min: float | None = None
    max: float | None = None
    values: tuple[str, ...] = ()
    metrics: tuple[LatencyMetric, ...] = ("tpot", "ttft")
    direction: Direction = "increase"
    allowed_relative: float = Field(default=0.05, ge=0.0)
    allowed_absolute: float = Field(default=0.0, ge=0.0)
    critical: bool = True
    required: bool = False
    label: str | None = None
    why: str = ""


class ImprovementRule(_Strict):
    """An improvement the candidate claims: ``metric`` lower by at least ``at_least`` seconds
    on requests with at least ``min_items`` items. Pass: proven; fail: ruled out.

    ``required: false`` makes a critical claim a guard: ruled out, it fails the run; open or
    never reached by the traffic, it blocks nothing (``abserve check`` and ``abserve run``
    refuse a required critical gate the planned traffic cannot reach:
    ``abserve.compare.reachability``)."""

    metric: LatencyMetric
    min_items: int = Field(ge=0)
    at_least: float = Field(default=0.0, ge=0.0)
    critical: bool = True
    required: bool = True

    @property
    def name(self) -> str:
        return f"{self.metric}.improvement@{self.min_items}+"


class PerItemRule(_Strict):
    """The cost per item: slope of ``candidate - baseline`` of ``metric`` against items per
    request. Pass when at most ``allowed`` seconds per item (the bad direction is increase)."""

    metric: LatencyMetric
    allowed: float = 0.0
    critical: bool = False
    required: bool = True  # false with critical: a guard, as ``ImprovementRule.required``

    @property
    def name(self) -> str:
        return f"{self.metric}.per_item"


class SavedRule(_Strict):
    """How ``abserve compare`` judges saved runs of other tools (``abserve.compare.unpaired``).

    ``run_to_run_spread``: the relative difference two runs of ONE build may show in a latency
    statistic (a bound at the policy's confidence). With one run per side a latency ``fail``
    must exceed the allowance plus this share of the baseline value, and no gate passes; with
    repeats on a side the measured spread replaces it. Default 0.12 from the public record:
    two runs of one vLLM branch differed by 11-12% in mean TTFT (vLLM PR 40631), six identical
    runs spread 6.9% (benchmarks/unpaired.md).
    """

    run_to_run_spread: float = Field(default=0.12, ge=0.0)


class PrefixCacheRule(_Strict):
    """The prefix-cache hit-rate finding (``abserve.compare.prefix_cache``): the arms' hit rates
    (cached prompt tokens per prompt token looked up, from each server's metrics) differing by
    more than ``max_hit_rate_difference`` (an absolute difference of rates: 0.05 = 5 points) is
    stated on the first screen as a finding of its own. It never changes the verdict: the arms
    received identical requests, so a difference is the candidate's own doing, and what it costs
    or saves the users is what the latency gates judge (a later-turn stratum sees it first)."""

    max_hit_rate_difference: float = Field(default=0.05, ge=0.0, le=1.0)


class Policy(_Strict):
    """A complete sign-off policy; its defaults are ``configs/policy/default.yaml``'s.

    ``mode``: ``fixed`` (the default, as ``default.yaml`` states) judges each gate once, with
    intervals valid for that one look; ``sequential`` judges every gate with anytime-valid
    intervals at every look, so a run may stop once it is decided. Every shipped policy states
    its mode (``cpu-default``, ``gpu``, ``selftest`` and the ones extending them: sequential).
    """

    schema_version: int = 1
    name: str = "default"
    mode: Mode = "fixed"
    arms: ArmRoles = ArmRoles()
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    min_samples: int = Field(default=30, ge=1)
    warmup_requests: int = Field(default=0, ge=0)
    warmup_seconds: float = Field(default=0.0, ge=0.0)
    max_error_rate: float = Field(default=MAX_ERROR_RATE, ge=0.0, le=1.0)
    min_coverage: float = Field(default=0.99, ge=0.0, le=1.0)
    allow_unmeasured_floor: bool = True
    # An arm that proves no lookup (an external endpoint, a stock build) is reported as
    # "unproven"; with require_proof such an arm makes the run invalid.
    require_proof: bool = False
    equality: EqualityRule = EqualityRule()
    placement: PlacementRule = PlacementRule()
    sequential: SequentialRule = SequentialRule()
    neighbours: NeighbourRule = NeighbourRule()
    improvements: tuple[ImprovementRule, ...] = ()
    per_item: tuple[PerItemRule, ...] = ()
    strata: tuple[StratumRule, ...] = ()
    saved: SavedRule = SavedRule()
    # Written (and hashed in ``digest``) only when a policy file gives it, so the policies and
    # reports from before it existed keep their bytes and their SHA-256 (``_as_written``).
    prefix_cache: PrefixCacheRule = PrefixCacheRule()
    metrics: tuple[MetricRule, ...] = (
        MetricRule(metric="tpot", statistic="hl", allowed_relative=0.05, critical=True),
        MetricRule(metric="ttft", statistic="hl", allowed_relative=0.05, critical=True),
    )
    items_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    bootstrap_resamples: int = Field(default=2000, ge=100)
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _legacy_switch(cls, data: Any) -> Any:
        """``sequential.enabled``, the switch ``mode`` replaced, still loads: true is ``mode:
        sequential``, false ``mode: fixed``. Where a policy holds both (a user's older file that
        ``extends`` a shipped one, which now sets ``mode``) the old key decides: it was written
        for that file. Stored reports (``report.json``'s ``policy``) carry it too."""
        if not isinstance(data, dict) or not isinstance(data.get("sequential"), dict):
            return data
        rule = dict(data["sequential"])
        if "enabled" not in rule:
            return data
        enabled = rule.pop("enabled")
        if not isinstance(enabled, bool):
            raise ValueError(f"sequential.enabled must be true or false, not {enabled!r} (now: mode)")
        return {**data, "sequential": rule, "mode": "sequential" if enabled else "fixed"}

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if "prefix_cache" not in self.model_fields_set:
            dumped.pop("prefix_cache", None)
        return dumped

    @field_validator("items_buckets")
    @classmethod
    def _ascending(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or list(value) != sorted(set(value)) or value[0] < 0:
            raise ValueError("items_buckets must be non-empty, non-negative and strictly ascending")
        return value

    def digest(self) -> str:
        """sha256 of the canonical JSON of the policy (for provenance)."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class PolicyError(ValueError):
    """A policy file that cannot be read or does not validate."""


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy YAML file or packaged name (``abserve.base.packaged``: ``gpu``);
    raises ``PolicyError`` with the reason."""
    p = Path(path)
    try:
        p = resolve_config(path, "policy")
        data = read_mapping(p, kind="policy")
    except (PackagedError, YamlFileError) as exc:
        raise PolicyError(f"cannot read policy {p}: {exc}") from exc
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"invalid policy {p}: {exc}") from exc


def bucket_label(items: int | None, edges: tuple[int, ...]) -> str:
    """The items-per-request bucket: ``"4-7"`` for edges (..., 4, 8, ...); ``"?"`` when unknown."""
    if items is None:
        return "?"
    lower = [e for e in edges if e <= items]
    if not lower:
        return f"<{edges[0]}"
    lo = lower[-1]
    nxt = [e for e in edges if e > lo]
    if not nxt:
        return f"{lo}+"
    return str(lo) if nxt[0] - 1 == lo else f"{lo}-{nxt[0] - 1}"
