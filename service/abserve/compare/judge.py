"""``judge(run, exchanges, policy) -> Judgment``: the whole judgment of one run, pure.

Order of work: drop warm-up exchanges; check the run can be trusted at all; grade equality for
baseline/candidate and baseline/floor; measure per-request latency on every arm; judge each
gate; break the shifts down by profile and items bucket and fit their trend over items (and
by turn and shared prefix for conversations; each arm's prefix-cache hit rate);
summarise each arm; combine everything into one verdict.

What the policy's ``mode`` changes is one ``JudgmentPath``: ``judge_sequential.Sequential``
(anytime-valid at every look) or ``judge_fixed.FixedSample`` (one look). Each decides the
warm-up, which exchanges equality compares, the equality verdict, the gates and how the
verdict counts a non-critical line; everything else here is the same for both.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

import numpy as np

from abserve.compare.acknowledgement import acknowledgement_statement
from abserve.compare.capacity_gates import gate_rows, judge_capacity
from abserve.compare.causes import name_drift_causes
from abserve.compare.contamination import apply_contamination
from abserve.compare.digest import Digester
from abserve.compare.equality import problem_of
from abserve.compare.gate_line import finite
from abserve.compare.judge_fixed import FixedSample
from abserve.compare.judge_sequential import Sequential
from abserve.compare.latency import METRICS, RequestLatency, arm_values, paired_sample, throughput
from abserve.compare.model import (
    PERCENTILES,
    ArmSummary,
    BreakdownRow,
    EqualityLine,
    EqualityVerdict,
    JudgedArm,
    JudgedProvenance,
    Judgment,
    MetricLine,
    PlacementLine,
    TrendLine,
)
from abserve.compare.pacing import pacing_statement, withhold_fails
from abserve.compare.placement import placement_line
from abserve.compare.policy import Mode, Policy, bucket_label
from abserve.compare.prefix_cache import arm_labels, prefix_cache_finding
from abserve.compare.stats.paired import evenly, hodges_lehmann, quantiles, theil_sen_trend
from abserve.compare.turns import turn_rows
from abserve.compare.verdict import invalid_reasons, overall
from abserve.model.records import Exchange, RunInfo

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]
Dimension = Literal["profile", "items", "block"]


class JudgmentPath(Protocol):
    """What the fixed-sample and the sequential judgment do differently."""

    @property
    def sequential(self) -> bool:
        """Anytime-valid at every look (``Judgment.sequential``; ``verdict.overall``'s rule)."""

    @property
    def compares_warmup(self) -> bool:
        """Whether equality compares the warm-up exchanges too."""

    def judged(self, ordered: list[Exchange], lat: Latencies, policy: Policy) -> tuple[list[Exchange], str]:
        """The exchanges latency is judged on, and what was cut as warm-up and why."""

    def equality(self, main: EqualityLine, floor: tuple[int, int] | None, policy: Policy) -> EqualityVerdict:
        """The equality verdict of ``main`` against the floor's ``(mismatches, comparable)``."""

    def gates(self, judged: list[Exchange], lat: Latencies,
              policy: Policy) -> tuple[list[MetricLine], bool, int]:
        """Every gate's line, whether placement was controlled, and how many looks."""


PATHS: dict[Mode, JudgmentPath] = {"sequential": Sequential(), "fixed": FixedSample()}


def path_of(policy: Policy) -> JudgmentPath:
    """The judgment path of ``policy.mode``."""
    return PATHS[policy.mode]


def select_judged(ordered: list[Exchange], lat: Latencies, policy: Policy) -> tuple[list[Exchange], str]:
    """The exchanges to judge latency on under ``policy``'s path, and what was cut as warm-up."""
    return path_of(policy).judged(ordered, lat, policy)


def placement_lines(exchanges: list[Exchange], lat: Latencies, policy: Policy,
                    floor: str | None) -> list[PlacementLine]:
    """The block design per ``hl`` metric: baseline vs candidate, and vs the A/A' floor."""
    metrics = dict.fromkeys(r.metric for r in policy.metrics if r.statistic == "hl")
    pairs = [(policy.arms.baseline, other) for other in (policy.arms.candidate, floor) if other]
    return [placement_line(exchanges, lat, m, left, right, policy) for left, right in pairs for m in metrics]


def breakdowns(
    exchanges: list[Exchange], lat: Latencies, policy: Policy
) -> tuple[list[BreakdownRow], list[TrendLine]]:
    """Hodges–Lehmann shifts per profile, items bucket and block; the trend over items."""
    rows: list[BreakdownRow] = []
    trends: list[TrendLine] = []
    for metric in dict.fromkeys(r.metric for r in policy.metrics):
        s = paired_sample(exchanges, lat, metric, policy.arms.baseline, policy.arms.candidate)
        diffs, items, blocks = s.diffs, s.items, s.blocks
        labels: dict[Dimension, list[str]] = {
            "profile": s.profiles,
            "items": _bucket_labels(items, policy.items_buckets),
        }
        if any(b is not None for b in blocks):
            labels["block"] = [b or "none" for b in blocks]
        for dim, keys in labels.items():
            for key, values in _grouped(diffs, keys).items():
                iv = hodges_lehmann(values, policy.confidence)
                rows.append(
                    BreakdownRow(
                        dimension=dim,
                        group=key,
                        metric=metric,
                        n=iv.n,
                        estimate=iv.estimate,
                        low=finite(iv.low),
                        high=finite(iv.high),
                    )
                )
        known = evenly(np.flatnonzero(np.fromiter((i is not None for i in items), dtype=bool,
                                                   count=len(items))))
        xs = np.fromiter((0 if i is None else i for i in items), dtype=np.float64, count=len(items))
        trend = theil_sen_trend(xs[known], diffs[known], policy.confidence)
        if trend is not None:
            trends.append(
                TrendLine(metric=metric, slope=trend.slope, low=trend.low, high=trend.high, n=trend.n,
                          intercept=trend.intercept)
            )
    return rows, trends


def _bucket_labels(items: list[int | None], edges: tuple[int, ...]) -> list[str]:
    """``bucket_label`` of each item count, one shared string per distinct count."""
    seen: dict[int | None, str] = {}
    return [seen[i] if i in seen else seen.setdefault(i, bucket_label(i, edges)) for i in items]


def _grouped(values: np.ndarray, keys: list[str]) -> dict[str, np.ndarray]:
    """``values`` split by ``keys``: the groups in order of first appearance, each in order."""
    codes: dict[str, int] = {}
    at = np.fromiter((codes.setdefault(k, len(codes)) for k in keys), dtype=np.int64, count=len(keys))
    if not len(at):
        return {}
    parts = np.split(values[np.argsort(at, kind="stable")], np.cumsum(np.bincount(at))[:-1])
    return dict(zip(codes, parts, strict=True))


def _role(name: str, policy: Policy) -> str:
    roles = {policy.arms.baseline: "baseline", policy.arms.candidate: "candidate"}
    if policy.arms.floor:
        roles[policy.arms.floor] = "floor"
    return roles.get(name, "other")


def arm_summary(
    name: str, run: RunInfo, exchanges: list[Exchange], lat: Latencies, policy: Policy
) -> ArmSummary:
    """One arm's provenance, errors, throughput and latency percentiles."""
    prov = run.arms.get(name)
    requests, truncated, problems = _outcome_counts(exchanges, name)
    tp = throughput(exchanges, name)
    dists: dict[str, list[float]] = {}
    for metric in METRICS:
        values = arm_values(exchanges, lat, name, metric)
        if len(values):
            dists[metric] = quantiles(values, PERCENTILES)
    summary = ArmSummary(
        name=name,
        role=_role(name, policy),
        requests=requests,
        errors=dict(problems),
        error_rate=sum(problems.values()) / requests if requests else 0.0,
        truncated=truncated,
        requests_per_s=tp.requests_per_s,
        tokens_per_s=tp.tokens_per_s,
        distributions=dists,
    )
    if prov is not None:
        summary = summary.model_copy(
            update={
                "expected_lookup": prov.expected_lookup,
                "proven_lookup": prov.proven_lookup,
                "proof_detail": prov.proof_detail,
                "patched_modules": prov.patched_modules,
                "vllm_version": prov.vllm_version,
                "server_args": prov.server_args,
                "telemetry": prov.telemetry,
            }
        )
    return summary


def _outcome_counts(exchanges: list[Exchange], name: str) -> tuple[int, int, Counter[str]]:
    """Arm ``name``'s requests, truncated answers and problems, one outcome at a time (a
    digest builds each ``SlimOutcome`` on access: a list of them all would hold ~0.5 KB each)."""
    requests, truncated, problems = 0, 0, Counter[str]()
    for ex in exchanges:
        outcome = ex.arms.get(name)
        if outcome is None:
            continue
        requests += 1
        truncated += outcome.truncated
        if (problem := problem_of(outcome)) is not None:
            problems[problem] += 1
    return requests, truncated, problems


def _provenance(run: RunInfo, policy: Policy) -> JudgedProvenance:
    config = json.dumps(run.config, sort_keys=True, separators=(",", ":"), default=str)
    arms = {name: JudgedArm(vllm_version=p.vllm_version, server_args=p.server_args, url=p.url,
                            placement=p.placement, expected_lookup=p.expected_lookup,
                            proven_lookup=p.proven_lookup, patched_modules=p.patched_modules)
            for name, p in run.arms.items()}
    # the run's keys as stored (in their order), then what judging adds
    return JudgedProvenance.model_validate({
        **run.provenance.model_dump(), "policy_name": policy.name, "policy_sha256": policy.digest(),
        "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
        "run_started_at": run.started_at, "run_ended_at": run.ended_at, "arms": arms,
    })


def judge(run: RunInfo, exchanges: Iterable[Exchange], policy: Policy) -> Judgment:
    """Judge one run's exchanges under ``policy``; never raises on bad data, reports it.
    The exchanges are digested as they are iterated (``abserve.compare.digest``): a store's
    page-by-page iterator is never held in memory whole."""
    digest = Digester(policy)
    digest.feed(exchanges)
    return judge_digest(run, digest, policy)


def judge_digest(run: RunInfo, digest: Digester, policy: Policy) -> Judgment:
    """Judge the exchanges ``digest`` was fed (``policy`` must be the one it was made with)."""
    all_ex = digest.ordered()
    path = path_of(policy)
    roles = policy.arms
    lat_all: Latencies = digest.latencies
    judged, warm_detail = path.judged(all_ex, lat_all, policy)
    arm_names = sorted({a for ex in judged for a in ex.arms} | set(run.arms))
    floor = roles.floor if roles.floor and any(roles.floor in ex.arms for ex in judged) else None
    lat = lat_all  # read only at the judged exchanges' ids
    summaries = {a: arm_summary(a, run, judged, lat, policy) for a in arm_names}
    errors = {a: sum(s.errors.values()) for a, s in summaries.items()}
    invalid = invalid_reasons(run, judged, policy, errors)
    compared = all_ex if path.compares_warmup else judged
    tolerance = digest.tolerance(compared, floor)
    pairs: list[EqualityLine] = [
        digest.equality_line(compared, roles.baseline, other, tolerance)
        for other in (roles.candidate, floor)
        if other
    ]
    floor_counts = (pairs[1].summary.mismatches, pairs[1].comparable) if floor else None
    eq = path.equality(pairs[0], floor_counts, policy)
    lines, placement_known, looks = path.gates(judged, lat, policy)
    name_drift_causes(lines, judged, lat, policy)
    eq.drift_tolerance = tolerance
    pacing, withhold = pacing_statement(run, all_ex)
    pacing = " ".join(t for t in (pacing, acknowledgement_statement(run)) if t) or None
    if withhold:
        withhold_fails(lines)
    neighbours = apply_contamination(lines, invalid, run.provenance, policy.neighbours)
    rows, trends = breakdowns(judged, lat, policy)
    placement = placement_lines(judged, lat, policy, floor)
    gates = [("equality", eq.critical, eq.outcome, eq.reason)]
    gates += [(m.name, m.critical, m.outcome, m.reason) for m in lines]
    capacity = judge_capacity(run.provenance.capacity) if run.provenance.capacity else None
    gates += gate_rows(capacity) if capacity is not None else []
    held = [(m.name, m.reason) for m in lines if m.regression and not m.critical and m.outcome == "unstable"]
    verdict, code, reasons = overall(invalid, gates, path.sequential, held)
    if verdict == "invalid" and run.provenance.load_stop is not None:
        code = run.provenance.load_stop.exit_code  # 6 or 7: the load's stop, as ``abserve load`` exits
    return Judgment(
        run_id=run.run_id,
        run_status=run.status,
        started_at=run.started_at,
        ended_at=run.ended_at,
        verdict=verdict,
        exit_code=code,
        reasons=reasons,
        invalid_reasons=invalid,
        exchanges_total=len(all_ex),
        exchanges_warmup=len(all_ex) - len(judged),
        exchanges_judged=len(judged),
        warmup_detail=warm_detail,
        placement_known=placement_known,
        pacing=pacing,
        sequential=path.sequential,
        looks=looks,
        arms=summaries,
        equality=pairs,
        equality_verdict=eq,
        metrics=lines,
        breakdowns=rows,
        trends=trends,
        placement=placement,
        neighbours=neighbours.facts if neighbours else [],
        provenance=_provenance(run, policy),
        policy=policy.model_dump(mode="json"),
        turns=turn_rows(judged, lat, policy),
        prefix_cache=prefix_cache_finding(run.provenance.blocks, policy, arm_labels(summaries)),
        capacity=capacity.model_dump(mode="json") if capacity is not None else None,
    )
