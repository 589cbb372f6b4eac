"""``judge(run, exchanges, policy) -> Judgment``: the whole judgment of one run, pure.

Order of work: drop warm-up exchanges; check the run can be trusted at all; grade equality for
baseline/candidate and baseline/floor; measure per-request latency on every arm; judge each
latency rule on the paired differences; break the shifts down by profile and items bucket and
fit their trend over items; summarise each arm; combine everything into one verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Literal

import numpy as np

from abserve.compare.blocked import pair_placement
from abserve.compare.contamination import apply_contamination
from abserve.compare.digest import Digester
from abserve.compare.equality import problem_of
from abserve.compare.gates import improvement_line, per_item_line, shift_line
from abserve.compare.latency import (
    METRICS,
    RequestLatency,
    paired_sample,
    throughput,
)
from abserve.compare.model import (
    PERCENTILES,
    ArmSummary,
    BreakdownRow,
    EqualityLine,
    Judgment,
    MetricLine,
    PlacementLine,
    TrendLine,
)
from abserve.compare.pacing import pacing_statement, withhold_fails
from abserve.compare.placement import bias_guard, placement_line, sample_levels, shift_of
from abserve.compare.policy import MetricRule, Policy, bucket_label
from abserve.compare.quantile_cs import drift_guard_tails, tail_line
from abserve.compare.sequential import look_ends
from abserve.compare.stats import (
    bootstrap_quantile_diff,
    hodges_lehmann,
    quantiles,
    theil_sen_trend,
)
from abserve.compare.strata import stratum_lines
from abserve.compare.verdict import (
    equality_verdict,
    invalid_reasons,
    latency_outcome,
    overall,
    sequential_equality,
    threshold_for,
    too_few,
)
from abserve.compare.warmup import describe, transient_cut
from abserve.records import Exchange, RunInfo

Latencies = dict[str, dict[str, RequestLatency | None]]
Dimension = Literal["profile", "items", "block"]


def drop_warmup(exchanges: Iterable[Exchange], policy: Policy) -> tuple[list[Exchange], int]:
    """Exchanges in start order minus the warm-up ones, and how many were dropped."""
    ordered = sorted(exchanges, key=lambda ex: (ex.started_at, ex.request_id))
    if not ordered:
        return [], 0
    cutoff = ordered[0].started_at + policy.warmup_seconds
    kept = [ex for i, ex in enumerate(ordered) if i >= policy.warmup_requests and ex.started_at >= cutoff]
    return kept, len(ordered) - len(kept)


def select_judged(ordered: list[Exchange], lat: Latencies, policy: Policy) -> tuple[list[Exchange], str]:
    """The exchanges to judge latency on: after the fixed warm-up, and after the arms' initial
    transient when the policy detects it (``sequential.warmup: auto``); and why."""
    kept, fixed = drop_warmup(ordered, policy)
    if not (policy.sequential.enabled and policy.sequential.warmup == "auto"):
        return kept, f"first {fixed} exchanges cut (fixed warm-up)"
    arms = [policy.arms.baseline, policy.arms.candidate]
    cut = transient_cut(ordered, lat, arms, policy.sequential.max_warmup_fraction)
    start = max(fixed, cut.index)
    return ordered[start:], describe(cut, fixed)


def sequential_lines(judged: list[Exchange], lat: Latencies,
                     policy: Policy) -> tuple[list[MetricLine], bool, int]:
    """Every gate judged anytime-valid at every look; whether placement was controlled; looks."""
    roles = policy.arms
    levels = {pair_placement(ex.tags, roles.baseline, roles.candidate) for ex in judged} - {None}
    ends = look_ends(judged, max(len(levels), 1), policy.sequential.look_every)
    known = bool(levels)
    lines = []
    for rule in policy.metrics:
        if rule.statistic == "hl":
            lines.append(shift_line(rule, judged, lat, policy, ends, known))
        elif policy.sequential.tails == "anytime":
            lines.append(tail_line(rule, judged, lat, policy, ends))
        else:
            fixed = metric_line(rule, judged, lat, policy)
            fixed.reason += " (fixed-sample interval, not anytime-valid)"
            lines.append(fixed)
    lines += [improvement_line(rule, judged, lat, policy, ends) for rule in policy.improvements]
    lines += [per_item_line(rule, judged, lat, policy, ends) for rule in policy.per_item]
    lines += stratum_lines(judged, lat, policy, ends, known)
    drift_guard_tails(lines)
    return lines, known, len(ends)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def metric_line(rule: MetricRule, exchanges: list[Exchange], lat: Latencies, policy: Policy) -> MetricLine:
    """Judge one latency rule on the paired per-request values.

    An ``hl`` line of a run with counterbalanced blocks is judged on the counterbalanced
    estimate (``abserve.compare.placement``); the pooled one is kept as ``naive_*``.
    """
    roles = policy.arms
    sample = paired_sample(exchanges, lat, rule.metric, roles.baseline, roles.candidate)
    n = len(sample.diffs)
    if n < policy.min_samples:
        return too_few(rule, n, policy)
    shift = None
    if rule.statistic == "hl":
        iv = hodges_lehmann(sample.diffs, policy.confidence)
        base_v, cand_v = float(np.median(sample.baseline)), float(np.median(sample.candidate))
        if policy.placement.counterbalance:
            levels = sample_levels(sample, exchanges, roles.baseline, roles.candidate)
            shift = shift_of(sample, levels, policy)
    else:
        q = int(rule.statistic[1:]) / 100
        iv = bootstrap_quantile_diff(
            sample.baseline,
            sample.candidate,
            q,
            confidence=policy.confidence,
            resamples=policy.bootstrap_resamples,
            seed=policy.seed,
        )
        base_v, cand_v = (
            float(np.quantile(sample.baseline, q)),
            float(np.quantile(sample.candidate, q)),
        )
    threshold = threshold_for(rule, base_v)
    est, low, high = (iv.estimate, iv.low, iv.high)
    if shift is not None:
        est, low, high = shift.estimate, shift.low, shift.high
    outcome, reason = latency_outcome(rule, est, low, high, threshold)
    if shift is not None:
        reason = f"counterbalanced over {len(shift.levels)} placements: {reason}"
        outcome, reason = bias_guard(rule, outcome, reason, shift, threshold, policy)
    return MetricLine(
        name=rule.name,
        metric=rule.metric,
        statistic=rule.statistic,
        direction=rule.direction,
        critical=rule.critical,
        n=n,
        baseline_value=base_v,
        candidate_value=cand_v,
        estimate=est,
        relative=est / base_v if base_v else None,
        low=_finite(low),
        high=_finite(high),
        confidence=policy.confidence,
        threshold=threshold,
        outcome=outcome,
        reason=reason,
        method="pooled" if shift is None else "counterbalanced",
        naive_estimate=None if shift is None else iv.estimate,
        naive_low=None if shift is None else _finite(iv.low),
        naive_high=None if shift is None else _finite(iv.high),
        placement_bias=None if shift is None else shift.bias,
    )


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
        diffs = s.diffs
        labels: dict[Dimension, list[str]] = {
            "profile": s.profiles,
            "items": [bucket_label(i, policy.items_buckets) for i in s.items],
        }
        if any(b is not None for b in s.blocks):
            labels["block"] = [b or "none" for b in s.blocks]
        for dim, keys in labels.items():
            groups: dict[str, list[float]] = {}
            for d, key in zip(diffs, keys, strict=True):
                groups.setdefault(key, []).append(d)
            for key, values in groups.items():
                iv = hodges_lehmann(values, policy.confidence)
                rows.append(
                    BreakdownRow(
                        dimension=dim,
                        group=key,
                        metric=metric,
                        n=iv.n,
                        estimate=iv.estimate,
                        low=_finite(iv.low),
                        high=_finite(iv.high),
                    )
                )
        known = _evenly([(i, d) for i, d in zip(s.items, diffs, strict=True) if i is not None])
        trend = theil_sen_trend([i for i, _ in known], [d for _, d in known], policy.confidence)
        if trend is not None:
            trends.append(
                TrendLine(metric=metric, slope=trend.slope, low=trend.low, high=trend.high, n=trend.n,
                          intercept=trend.intercept)
            )
    return rows, trends


TREND_POINTS = 3000  # Theil-Sen takes every pair of points: memory and time grow with n**2


def _evenly(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """At most ``TREND_POINTS`` of ``points``, evenly spaced in start order (all of a run of
    up to that many): the trend of a soak of 100,000 requests from every pair would need
    tens of GiB; a sub-sample's interval is only wider, never falsely narrow."""
    if len(points) <= TREND_POINTS:
        return points
    picks = np.linspace(0, len(points) - 1, TREND_POINTS).round().astype(int)
    return [points[i] for i in picks]


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
    outcomes = [ex.arms[name] for ex in exchanges if name in ex.arms]
    problems = Counter(p for p in (problem_of(o) for o in outcomes) if p is not None)
    tp = throughput(exchanges, name)
    dists: dict[str, list[float]] = {}
    for metric in METRICS:
        values = [
            v
            for ex in exchanges
            if (rl := lat[ex.request_id].get(name)) and (v := rl.get(metric)) is not None
        ]
        if values:
            dists[metric] = quantiles(values, PERCENTILES)
    summary = ArmSummary(
        name=name,
        role=_role(name, policy),
        requests=len(outcomes),
        errors=dict(problems),
        error_rate=sum(problems.values()) / len(outcomes) if outcomes else 0.0,
        truncated=sum(o.truncated for o in outcomes),
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


def _provenance(run: RunInfo, policy: Policy) -> dict[str, object]:
    out: dict[str, object] = run.provenance.model_dump()
    out["policy_name"], out["policy_sha256"] = policy.name, policy.digest()
    config = json.dumps(run.config, sort_keys=True, separators=(",", ":"), default=str)
    out["config_sha256"] = hashlib.sha256(config.encode()).hexdigest()
    out["run_started_at"], out["run_ended_at"] = run.started_at, run.ended_at
    out["arms"] = {
        name: {
            "vllm_version": p.vllm_version,
            "server_args": p.server_args,
            "url": p.url,
            "placement": p.placement,
            "expected_lookup": p.expected_lookup,
            "proven_lookup": p.proven_lookup,
            "patched_modules": p.patched_modules,
        }
        for name, p in run.arms.items()
    }
    return out


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
    seq = policy.sequential.enabled
    roles = policy.arms
    lat_all: Latencies = digest.latencies
    judged, warm_detail = select_judged(all_ex, lat_all, policy)
    arm_names = sorted({a for ex in judged for a in ex.arms} | set(run.arms))
    floor = roles.floor if roles.floor and any(roles.floor in ex.arms for ex in judged) else None
    lat = {ex.request_id: lat_all[ex.request_id] for ex in judged}
    summaries = {a: arm_summary(a, run, judged, lat, policy) for a in arm_names}
    errors = {a: sum(s.errors.values()) for a, s in summaries.items()}
    invalid = invalid_reasons(run, judged, policy, errors)
    compared = all_ex if seq else judged  # outputs of warm-up requests compare like any others
    tolerance = digest.tolerance(compared, floor)
    pairs: list[EqualityLine] = [
        digest.equality_line(compared, roles.baseline, other, tolerance)
        for other in (roles.candidate, floor)
        if other
    ]
    main = pairs[0]
    floor_counts = (pairs[1].summary.mismatches, pairs[1].comparable) if floor else None
    if seq:
        first = main.examples[0].request_id if main.examples else None
        eq = sequential_equality(main.summary.mismatches, main.comparable, floor_counts, policy, first)
        lines, placement_known, looks = sequential_lines(judged, lat, policy)
    else:
        eq = equality_verdict(main.summary.mismatches, main.comparable, floor_counts, policy)
        lines = [metric_line(rule, judged, lat, policy) for rule in policy.metrics]
        lines += stratum_lines(judged, lat, policy, [len(judged)], True)
        placement_known, looks = True, 1
    eq.drift_tolerance = tolerance
    pacing, withhold = pacing_statement(run, all_ex)
    if withhold:
        withhold_fails(lines)
    neighbours = apply_contamination(lines, invalid, run.provenance, policy.neighbours)
    rows, trends = breakdowns(judged, lat, policy)
    placement = placement_lines(judged, lat, policy, floor)
    gates = [("equality", eq.critical, eq.outcome, eq.reason)]
    gates += [(m.name, m.critical, m.outcome, m.reason) for m in lines]
    verdict, code, reasons = overall(invalid, gates, seq)
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
        sequential=seq,
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
    )
