"""Strata gates: no regression hides in a part of the traffic.

The overall shift averages over every request: a release 15% slower on a fifth of the traffic
moves it by 3%, inside a 5% allowance. A policy's ``strata:`` (``StratumRule``) names parts
of the traffic (images per request from ``min`` up, one traffic profile, any exchange tag),
each with its own allowance, and every stratum is judged with the same anytime-valid
machinery as the overall shift: ``gates.shift_line`` on the stratum's pairs alone (the linear
model with placement columns, winsorizing, drift guard, Lindon et al.'s confidence sequence),
with the looks re-counted in the stratum's own pairs.

**Multiplicity: Bonferroni over the stratum gates.** With ``m`` stratum gates (strata times
metrics) each confidence sequence runs at ``alpha / m``. Each one is time-uniform: with
probability ``1 - alpha / m`` it covers its stratum's true shift at every look at once, so
by the union bound all ``m`` cover at every look with probability ``1 - alpha``. A false
fail needs a sequence entirely beyond an allowance the true shift is within, i.e. one that
misses the truth at some look; so the probability of any false stratum fail, at any look,
under any stopping rule (the run's own included), is at most ``alpha``. Holm's step-down
would need anytime p-values and gives no simultaneous intervals for the report; Bonferroni
keeps the intervals shown and the decisions one and the same. The strata family is judged
beside the overall gates, each of which spends the policy's alpha as before.

Reads only what a compact exchange digest keeps: tags, the item count, start order and the
per-request latency values (``paired_sample``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from abserve.compare.gate_line import guarded
from abserve.compare.gates import shift_line
from abserve.compare.latency import RequestLatency, items_of, paired_sample
from abserve.compare.model import MetricLine
from abserve.compare.policy import MetricRule, Policy, StratumRule
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]

IMAGE_TAGS = frozenset({"items", "images"})


def tag_value(ex: Exchange, tag: str) -> str | float | None:
    """An exchange's value of ``tag``: images per request for ``items``, else its tag text."""
    if tag in IMAGE_TAGS:
        items = items_of(ex)
        return None if items is None else float(items)
    return ex.tags.get(tag)


def member(ex: Exchange, rule: StratumRule) -> bool:
    """Whether ``ex`` belongs to the stratum ``rule``."""
    value = tag_value(ex, rule.tag)
    if value is None:
        return False
    if rule.values and str(value if not isinstance(value, float) else f"{value:g}") not in rule.values:
        return False
    if rule.min is None and rule.max is None:
        return True
    try:
        number = float(value)
    except ValueError:
        return False
    return (rule.min is None or number >= rule.min) and (rule.max is None or number < rule.max)


def label(rule: StratumRule) -> str:
    """The stratum in words: ``requests with >= 128 images``."""
    if rule.label:
        return rule.label
    what = "images" if rule.tag in IMAGE_TAGS else rule.tag
    if rule.values:
        return f"requests with {what} {' or '.join(rule.values)}"
    if rule.min is not None and rule.max is not None:
        return f"requests with {rule.min:g} to <{rule.max:g} {what}"
    if rule.min is not None:
        return f"requests with >= {rule.min:g} {what}"
    if rule.max is not None:
        return f"requests with < {rule.max:g} {what}"
    return f"requests with a {what} tag"


def gate_count(policy: Policy) -> int:
    """``m``: the stratum gates of the policy (the Bonferroni family)."""
    return sum(len(rule.metrics) for rule in policy.strata)


def sub_ends(mask: Sequence[bool], ends: Sequence[int]) -> list[int]:
    """The looks (in exchange counts of the whole run) re-counted in the stratum's exchanges."""
    prefix = np.concatenate(([0], np.cumsum(np.asarray(mask, dtype=np.int64))))
    return sorted({int(prefix[e]) for e in ends} - {0})


def stratum_lines(judged: list[Exchange], lat: Latencies, policy: Policy, ends: Sequence[int],
                  placement_known: bool) -> list[MetricLine]:
    """Every stratum gate of the policy, each at ``alpha / m``."""
    m = gate_count(policy)
    if m == 0:
        return []
    alpha = (1.0 - policy.confidence) / m
    narrow = policy.model_copy(update={"confidence": 1.0 - alpha})
    roles = policy.arms
    lines = []
    for rule in policy.strata:
        mask = [member(ex, rule) for ex in judged]
        part = [ex for ex, inside in zip(judged, mask, strict=True) if inside]
        looks = sub_ends(mask, ends)
        for metric in rule.metrics:
            total = len(paired_sample(judged, lat, metric, roles.baseline, roles.candidate).diffs)
            gate = MetricRule(metric=metric, statistic="hl", direction=rule.direction,
                              allowed_relative=rule.allowed_relative,
                              allowed_absolute=rule.allowed_absolute, critical=rule.critical)
            line = shift_line(gate, part, lat, narrow, looks or [len(part)], placement_known)
            lines.append(_as_stratum(line, rule, total, m, alpha))
    return lines


def _as_stratum(line: MetricLine, rule: StratumRule, total: int, m: int, alpha: float) -> MetricLine:
    """Name the line after its stratum, give its share of the traffic, apply the guard."""
    words = label(rule)
    line.name = f"{line.metric}.stratum[{rule.name}]"
    line.kind, line.stratum = "stratum", words
    line.share = line.n / total if total else None
    correction = f"Bonferroni over {m} stratum gates: alpha {alpha:.4g} each"
    line.reason = f"{headline(line)}; {line.reason}; {correction}"
    if rule.why:
        line.reason += f"; {rule.why}"
    return guarded(line, rule.critical, rule.required, line.n > 0)


def relative_span(line: MetricLine) -> tuple[float, float, float] | None:
    """The line's estimate and interval as fractions of the baseline value (None: unknown)."""
    base = line.baseline_value
    if not base or line.estimate is None:
        return None
    low = -math.inf if line.low is None else line.low / base
    high = math.inf if line.high is None else line.high / base
    return line.estimate / base, low, high


def headline(line: MetricLine) -> str:
    """``requests with >= 128 images (27% of traffic): TTFT +14% [+9%, +19%], allowed 5%``."""
    span = relative_span(line)
    share = "n/a" if line.share is None else f"{line.share:.0%}"
    metric = line.metric.upper()
    if span is None:
        return f"{line.stratum} ({share} of traffic): {metric} not yet measured"
    est, low, high = span
    allowed = (line.threshold or 0.0) / line.baseline_value if line.baseline_value else 0.0
    return (f"{line.stratum} ({share} of traffic): {metric} {_pct(est)} [{_pct(low)}, {_pct(high)}], "
            f"allowed {allowed:.0%}")


def _pct(x: float) -> str:
    return "unbounded" if not math.isfinite(x) else f"{x:+.0%}"
