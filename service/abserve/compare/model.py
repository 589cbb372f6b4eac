"""The judgment of a run: the content of ``report.json`` (versioned by ``schema_version``).

Readers must refuse a ``schema_version`` newer than theirs. Every number a reviewer sees in the
HTML or Markdown report comes from here, so the JSON alone reproduces the sign-off.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, computed_field, model_serializer

from abserve.compare.equality import PairResult
from abserve.compare.trajectory import Look as Look  # re-exported: the gates and the report read it here
from abserve.compare.trajectory import Looks, Trajectory
from abserve.model.provenance import RunProvenance
from abserve.model.records import LookupTelemetry

JUDGMENT_SCHEMA_VERSION = 1
# Judgment keys left out of report.json while empty: sections that most runs do not have.
WRITTEN_WHEN_PRESENT = frozenset({"turns", "prefix_cache", "capacity"})

Outcome = Literal["pass", "marginal", "fail", "inconclusive", "unstable", "invalid"]
EXIT_CODES: dict[str, int] = {"pass": 0, "fail": 1, "marginal": 2, "inconclusive": 2, "unstable": 2,
                              "invalid": 3}
DECIDED: frozenset[str] = frozenset({"pass", "fail"})


class Drift(BaseModel):
    """How much a gate's paired difference moved from the first judged exchange to the last."""

    estimate: float
    low: float | None = None
    high: float | None = None
    unstable: bool = False
    trajectory: Trajectory = Field(default_factory=Looks)
CauseKind = Literal["neighbours", "drift", "placement", "warmup"]


class Cause(BaseModel):
    """What held a gate open that its interval alone would have decided (``unstable``, or
    ``inconclusive`` for a placement's bias), in words for the first screen
    (``abserve.compare.causes``)."""

    kind: CauseKind
    detail: str


PERCENTILES: tuple[float, ...] = tuple(i / 100 for i in range(101))


class TailShare(BaseModel):
    """What a paired tail guard proves (issue 58, ``compare.slowed_share``): the net share of
    requests slowed beyond their own allowance (candidate slower by more than ``per_request`` of
    the request's own latency, or ``absolute``), minus the mirrored share (the baseline slower by
    as much), with its anytime-valid interval, against the guard's allowed share."""

    allowed_share: float  # 1 - p: 0.01 for a p99 guard, 0.05 for p95
    per_request: float  # relative allowance of each request (0.10: 10% of its own latency)
    absolute: float = 0.0  # absolute allowance of each request (seconds), where larger
    n: int
    slowed: int
    mirrored: int
    estimate: float
    low: float
    high: float


class MetricLine(BaseModel):
    """One latency gate: measured value, interval, threshold, outcome and the reason."""

    name: str  # "tpot.hl"
    metric: str
    statistic: str
    direction: str
    critical: bool
    n: int
    baseline_value: float | None = None  # the statistic on the baseline arm (seconds)
    candidate_value: float | None = None
    estimate: float | None = None  # candidate - baseline (seconds)
    relative: float | None = None  # estimate / baseline_value
    low: float | None = None
    high: float | None = None
    confidence: float
    threshold: float | None = None  # allowed change in the bad direction (seconds)
    outcome: Outcome
    reason: str
    method: str = "pooled"  # "counterbalanced": estimate/interval from compare.blocked
    naive_estimate: float | None = None  # all pairs pooled, blocks ignored (when counterbalanced)
    naive_low: float | None = None
    naive_high: float | None = None
    placement_bias: float | None = None  # largest measured placement bias (seconds)
    # Sequential judgment (``policy.mode: sequential``): what the line gates (``shift`` of
    # the statistic, ``improvement`` on a stratum, ``per_item`` slope in seconds per item),
    # the interval at every look, and the drift guard's measurement.
    kind: Literal["shift", "improvement", "per_item", "stratum", "tail"] = "shift"
    stratum: str | None = None
    share: float | None = None  # a stratum gate: its pairs / all pairs of the metric
    guard: bool = False  # critical only once it fails (compare/strata.py, compare/quantile_cs.py)
    tail_share: TailShare | None = None  # a paired tail guard: the share of requests it proved slowed
    # The interval proved a regression beyond the allowance, whether or not a guard then held
    # the outcome back as ``unstable`` (a drift, foreign load, a tail proven over the run but
    # not spread over the run): a non-critical line with it is never silent (``verdict.overall``).
    regression: bool = False
    trajectory: Trajectory = Field(default_factory=Looks)
    drift: Drift | None = None
    cause: Cause | None = None  # what held the line open (neighbours, drift, placement, warm-up)
    # A tail fail that holds with each request's allowance widened by ``neighbours.widen`` (the
    # neighbour rule keeps it: ``compare.contamination``); not part of the report.
    fail_beyond_neighbours: bool = Field(default=False, exclude=True)


class PlacementLevel(BaseModel):
    """The paired shift within one placement of the compared pair (its blocks combined)."""

    placement: str  # "a:0,b:1"
    blocks: int
    n: int
    estimate: float
    low: float | None = None
    high: float | None = None


class PlacementLine(BaseModel):
    """A pair's latency shift under the block design: counterbalanced, naive and the bias."""

    left: str
    right: str
    metric: str
    method: Literal["counterbalanced", "single-placement", "untagged"]
    estimate: float | None = None  # counterbalanced right - left (seconds)
    low: float | None = None
    high: float | None = None
    naive_n: int = 0
    naive_estimate: float | None = None  # every pair pooled (Hodges-Lehmann)
    naive_low: float | None = None
    naive_high: float | None = None
    bias: float | None = None  # placement bias of bias_placement (seconds)
    bias_low: float | None = None
    bias_high: float | None = None
    bias_placement: str | None = None
    tau: float | None = None  # between-block sd beyond placement (seconds)
    df: int = 0
    blocks_used: int = 0
    blocks_dropped: int = 0
    levels: list[PlacementLevel] = Field(default_factory=list)
    note: str = ""


class ClassCounts(BaseModel):
    """Equality classes counted over a group of exchanges."""

    total: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    mismatches: int = 0


class EqualityLine(BaseModel):
    """Graded equality of one arm pair over the judged exchanges."""

    left: str
    right: str
    summary: ClassCounts
    comparable: int
    rate: float | None = None  # mismatches / comparable
    low: float | None = None  # Clopper-Pearson interval of the rate
    high: float | None = None
    status_mismatches: int = 0
    finish_mismatches: int = 0
    usage_mismatches: int = 0
    left_problems: dict[str, int] = Field(default_factory=dict)
    right_problems: dict[str, int] = Field(default_factory=dict)
    by_position: dict[str, int] = Field(default_factory=dict)  # first differing position -> count
    drift_by_position: dict[str, int] = Field(default_factory=dict)
    by_items: dict[str, ClassCounts] = Field(default_factory=dict)
    by_profile: dict[str, ClassCounts] = Field(default_factory=dict)
    drift_quantiles: list[float] = Field(default_factory=list)  # max |dlogprob|, p0..p100 by 10
    # Prompt logprobs (the router's sample, ``prompt_logprobs_fraction``): exchanges compared
    # on them, how many drifted there, how many of those drifted ONLY there (output logprobs
    # within tolerance), where the first prompt drift falls, and the largest gap's quantiles.
    prompt_sampled: int = 0
    prompt_drifts: int = 0
    prompt_only_drifts: int = 0
    prompt_drift_by_position: dict[str, int] = Field(default_factory=dict)
    prompt_drift_quantiles: list[float] = Field(default_factory=list)
    examples: list[PairResult] = Field(default_factory=list)  # first mismatches, in order


class EqualityVerdict(BaseModel):
    """The candidate's mismatch rate judged against the A/A' noise floor."""

    floor_measured: bool
    floor_arm: str | None = None
    candidate_rate: float | None = None
    candidate_low: float | None = None
    candidate_high: float | None = None
    floor_rate: float | None = None
    floor_low: float | None = None
    floor_high: float | None = None
    p_value: float | None = None  # one-sided exact test that the candidate exceeds the floor
    threshold: float  # allowed excess rate
    drift_tolerance: float = 0.0  # |logprob| difference still counted identical
    critical: bool
    outcome: Outcome
    reason: str


class ArmSummary(BaseModel):
    """One arm: its role, what it proved, its errors, throughput and latency distribution."""

    name: str
    role: str  # baseline / candidate / floor / other
    expected_lookup: str | None = None
    proven_lookup: str | None = None
    proof_detail: str = ""
    patched_modules: list[str] = Field(default_factory=list)
    vllm_version: str | None = None
    server_args: list[str] = Field(default_factory=list)
    telemetry: LookupTelemetry = Field(default_factory=LookupTelemetry)
    requests: int = 0
    errors: dict[str, int] = Field(default_factory=dict)
    error_rate: float = 0.0
    truncated: int = 0
    requests_per_s: float = 0.0
    tokens_per_s: float = 0.0
    distributions: dict[str, list[float]] = Field(default_factory=dict)  # metric -> p0..p100


class BreakdownRow(BaseModel):
    """A paired latency shift (Hodges-Lehmann) within one traffic profile or items bucket."""

    dimension: Literal["profile", "items", "block"]
    group: str
    metric: str
    n: int
    estimate: float | None = None
    low: float | None = None
    high: float | None = None


class TurnRow(BaseModel):
    """Latency within one group of a conversation's requests (``abserve.compare.turns``):
    ``turn`` (first turn, later turns) or ``shared-prefix`` (shared, not shared); each arm's
    median and the paired A/B shift (Hodges-Lehmann, candidate - baseline, seconds)."""

    dimension: Literal["turn", "shared-prefix"]
    group: str
    metric: str
    n: int
    baseline: float | None = None  # median over the group's pairs
    candidate: float | None = None
    estimate: float | None = None
    low: float | None = None
    high: float | None = None


class CacheRate(BaseModel):
    """One arm's prefix cache over the judged blocks: prompt tokens looked up, tokens found."""

    queries: int
    hits: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class PrefixCacheFinding(BaseModel):
    """Each arm's prefix-cache hit rate and whether baseline and candidate differ by more
    than the policy's ``prefix_cache.max_hit_rate_difference`` (``abserve.compare.prefix_cache``)."""

    arms: dict[str, CacheRate]
    difference: float | None = None  # candidate rate - baseline rate; None: one is unmeasured
    threshold: float
    flagged: bool = False
    text: str  # the finding (or the rates) in one sentence


class TrendLine(BaseModel):
    """Theil-Sen slope of a paired difference against items per request (seconds per item)."""

    metric: str
    slope: float
    low: float
    high: float
    n: int
    intercept: float | None = None  # seconds at zero items: the fitted line (report's effect curve)


class UnpairedFacts(BaseModel):
    """What an unpaired judgment (``abserve compare`` of saved runs) stood on, for the first
    screen: the sources of each side, how the latency intervals were made, the run-to-run
    spread assumed or measured, and why equality was not measured (when it was not)."""

    baseline_sources: list[str]
    candidate_sources: list[str]
    tools: list[str] = Field(default_factory=list)
    model: str | None = None
    design: Literal["single-run", "clustered"]
    assumed_spread: float  # the policy's saved.run_to_run_spread (relative)
    measured_spread: dict[str, float] = Field(default_factory=dict)  # gate -> relative, clustered only
    spread_ratio: dict[str, float] = Field(default_factory=dict)  # metric -> run-to-run / within-run
    equality_note: str | None = None  # why equality was not measured
    equality_compared: str = ""  # how matched outputs were compared ("token", "character")
    unmatched: dict[str, int] = Field(default_factory=dict)  # what equality could not match, counted
    paired_command: str = ""


class JudgedArm(BaseModel):
    """What the judgment's provenance keeps of one arm's (``ArmProvenance``): every key, always."""

    vllm_version: str | None = None
    server_args: list[str] = Field(default_factory=list)
    url: str | None = None
    placement: dict[str, object] = Field(default_factory=dict)
    expected_lookup: str | None = None
    proven_lookup: str | None = None
    patched_modules: list[str] = Field(default_factory=list)


class JudgedProvenance(RunProvenance):
    """``Judgment.provenance``: the run's provenance as stored, plus what judging it added.

    Like every provenance record it writes only the keys that were given, so ``report.json``
    holds what it held when this was a free-form dict. A paired run's judgment
    (``compare.judge``) adds the policy, the config's hash, the run's times and its arms; a
    judgment of saved runs (``abserve compare``) holds ``kind``, ``command``, the policy and the
    ``sources`` only; a written report adds ``judged_by``."""

    policy_name: str | None = None
    run_started_at: float | None = None
    run_ended_at: float | None = None
    arms: dict[str, JudgedArm] = Field(default_factory=dict)
    kind: str | None = None  # "unpaired": saved runs judged by ``abserve compare``
    command: str | None = None
    sources: dict[str, list[str]] = Field(default_factory=dict)  # side -> the files as named
    judged_by: dict[str, str | None] | None = None  # the abserve that wrote the report


class Judgment(BaseModel):
    """Everything the report shows; ``report.json`` is exactly this model."""

    schema_version: int = JUDGMENT_SCHEMA_VERSION
    run_id: str
    run_status: str
    started_at: float
    ended_at: float | None = None
    verdict: Outcome
    exit_code: int
    reasons: list[str] = Field(default_factory=list)
    invalid_reasons: list[str] = Field(default_factory=list)
    exchanges_total: int = 0
    exchanges_warmup: int = 0
    exchanges_judged: int = 0
    warmup_detail: str = ""  # where the warm-up was cut and why
    placement_known: bool = True  # False: the arms' placement was not controlled (by-hand flow)
    pacing: str | None = None  # recorded with client_waits_for: primary (compare/pacing.py)
    sequential: bool = False  # judged with anytime-valid intervals at every look
    looks: int = 0
    arms: dict[str, ArmSummary] = Field(default_factory=dict)
    equality: list[EqualityLine] = Field(default_factory=list)
    equality_verdict: EqualityVerdict | None = None
    metrics: list[MetricLine] = Field(default_factory=list)
    breakdowns: list[BreakdownRow] = Field(default_factory=list)
    trends: list[TrendLine] = Field(default_factory=list)
    placement: list[PlacementLine] = Field(default_factory=list)
    neighbours: list[str] = Field(default_factory=list)  # foreign load per core (compare/contamination.py)
    provenance: JudgedProvenance = Field(default_factory=JudgedProvenance)
    policy: dict[str, object] = Field(default_factory=dict)
    unpaired: UnpairedFacts | None = None  # set by ``abserve compare`` (saved runs, not paired)
    # Conversations (issue 51); written only when present, so other runs' report.json keep their bytes.
    turns: list[TurnRow] = Field(default_factory=list)  # latency by turn and shared prefix
    prefix_cache: PrefixCacheFinding | None = None  # the arms' prefix-cache hit rates
    # The capacity stage's finding (``compare.capacity_gates``: ``CapacityFinding`` dumped)
    capacity: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {key: value for key, value in dumped.items() if key not in WRITTEN_WHEN_PRESENT or value}

    def lookup(self) -> dict[str, str | None]:
        """Per arm, the lookup mode its server proved (None = unproven)."""
        return {name: arm.proven_lookup for name, arm in self.arms.items()}
