"""The effect of images per request: the served difference and its cause, on one log axis.

- Per metric (TPOT, TTFT): the paired difference (candidate - baseline, Hodges-Lehmann with
  its interval) in each images-per-request bucket of the judgment's breakdowns, and the fitted
  Theil-Sen trend line (``TrendLine``: intercept + slope x images).
- The lookup telemetry counted inside each arm's servers: items examined per lookup call in
  each power-of-two bucket of the request's images (``LookupTelemetry.examined_per_request``).
- Each stratum gate's interval against its allowance, relative to the stratum's baseline
  (``compare.strata.headline``), and the anytime tail gates beside them; ``failing_strata``
  is the digest ``report.json``'s summary lists.

A panel without data is left out with one line saying why (never an empty chart).
Pure: everything comes from the ``Judgment``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

from markupsafe import Markup

from abserve.base.units import ms, us
from abserve.compare.model import Judgment, MetricLine, TrendLine
from abserve.compare.strata import headline
from abserve.compare.tail_gate import share_allowance, slowed_span
from abserve.report import svg_log
from abserve.report.svg_parts import COLORS

METRICS = ("tpot", "ttft")
NAMES = {"tpot": "TPOT (time per output token)", "ttft": "TTFT (time to first token)"}


@dataclass(frozen=True)
class Bucket:
    """One images-per-request bucket of a metric's paired differences (seconds)."""

    label: str
    x: float  # where it sits on the log axis (geometric middle of the bucket)
    n: int
    estimate: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Panel:
    metric: str
    chart: Markup | None
    note: str  # why there is no chart (empty when there is one)
    trend: str  # the fitted line in words
    buckets: list[Bucket]
    left_out: list[str] = field(default_factory=list)  # buckets that have no place on a log axis


@dataclass(frozen=True)
class LookupRow:
    arm: str
    bucket: str  # "8" = 8-15 images
    x: float
    calls: int
    examined: int

    @property
    def per_call(self) -> float:
        return self.examined / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class StratumRow:
    """One stratum or tail gate: its words against its allowance, and how it was decided."""

    name: str
    text: str  # "requests with >= 128 images (27% of traffic): TTFT +14% [+9%, +19%], allowed 5%"
    outcome: str
    gating: str  # "critical", "guard" (fails the run once proven) or "reported"


@dataclass(frozen=True)
class Effect:
    panels: list[Panel]
    lookup_chart: Markup | None
    lookup_note: str
    lookup_rows: list[LookupRow]
    strata: list[StratumRow] = field(default_factory=list)


def bucket_x(label: str) -> float | None:
    """``"4-7"`` -> about 5.3, ``"8"`` -> 8, ``"2048+"`` -> 2048; None for ``"<1"``, ``"?"``."""
    if label.endswith("+") and label[:-1].isdigit():
        return float(label[:-1]) or None
    lo, sep, hi = label.partition("-")
    if lo.isdigit() and (not sep or hi.isdigit()):
        a, b = int(lo), int(hi) if sep else int(lo)
        return math.sqrt(a * b) if a > 0 else None
    return None


def telemetry_x(key: str) -> float | None:
    """A telemetry bucket ``"k"`` (k..2k-1 images, a power of two) on the axis; None for 0."""
    if not key.isdigit() or int(key) == 0:
        return None
    k = int(key)
    return math.sqrt(k * (2 * k - 1))


def buckets(j: Judgment, metric: str) -> tuple[list[Bucket], list[str]]:
    placed, left = [], []
    for r in j.breakdowns:
        if r.dimension != "items" or r.metric != metric or r.estimate is None:
            continue
        x = bucket_x(r.group)
        if x is None:
            shift = ms(r.estimate)
            left.append(f"{r.group} images ({r.n} pairs, {shift}): not on the log axis")
        else:
            placed.append(Bucket(r.group, x, r.n, r.estimate, r.low, r.high))
    return sorted(placed, key=lambda b: b.x), left


_us3 = partial(us, places=3, unit=False)  # "µs per image" follows the number or the interval


def trend_words(t: TrendLine | None) -> str:
    if t is None:
        return "No trend fitted (fewer than 3 pairs or a single images-per-request value)."
    return (f"Fitted trend (Theil-Sen, {t.n} pairs): {_us3(t.slope)} µs per image "
            f"[{_us3(t.low)}, {_us3(t.high)}]"
            + ("" if t.intercept is not None else " (no intercept recorded: line not drawn)") + ".")


def gate_words(j: Judgment, metric: str) -> str:
    """The per-image gate on ``metric``, when the policy has one: what the verdict used."""
    gate = next((m for m in j.metrics if m.kind == "per_item" and m.metric == metric), None)
    if gate is None or gate.estimate is None:
        return ""
    kind = "anytime-valid" if gate.trajectory else "fixed-sample"
    bounds = ("not yet bounded" if gate.low is None or gate.high is None
              else f"[{_us3(gate.low)}, {_us3(gate.high)}]")
    return (f" The per-image gate ({kind} interval, the one the verdict uses): "
            f"{_us3(gate.estimate)} µs per image {bounds}, {gate.outcome}.")


def lookup_rows(j: Judgment) -> list[LookupRow]:
    rows = []
    for name, arm in j.arms.items():
        tele = arm.telemetry
        for key, examined in tele.examined_per_request.items():
            x, calls = telemetry_x(key), tele.items_per_request.get(key, 0)
            if x is not None and calls:
                rows.append(LookupRow(name, key, x, calls, examined))
    return sorted(rows, key=lambda r: (r.arm, r.x))


def x_range(j: Judgment, rows: list[LookupRow]) -> tuple[float, float] | None:
    xs = [b.x for m in METRICS for b in buckets(j, m)[0]] + [r.x for r in rows]
    if not xs:
        return None
    lo, hi = min(xs), max(xs)
    return max(lo / 1.4, 0.7), hi * 1.4 if hi > lo else lo * 2


def panel(j: Judgment, metric: str, span: tuple[float, float] | None) -> Panel:
    placed, left = buckets(j, metric)
    trend = next((t for t in j.trends if t.metric == metric), None)
    words = trend_words(trend) + gate_words(j, metric)
    if span is None or len(placed) < 2:
        why = ("no paired differences by images per request (no items tags or no pairs)" if not placed
               else f"a single images-per-request bucket ({placed[0].label}, {placed[0].n} pairs)")
        return Panel(metric, None, f"{NAMES[metric]}: no effect curve: {why}.", words, placed, left)
    points = [svg_log.XPoint(b.x, b.estimate * 1e3, None if b.low is None else b.low * 1e3,
                             None if b.high is None else b.high * 1e3,
                             f"{b.label} images, {b.n} pairs: {ms(b.estimate, places=4)}")
              for b in placed]
    curves = []
    if trend is not None and trend.intercept is not None:
        a, s = trend.intercept, trend.slope
        curves.append(svg_log.XCurve(f"fitted trend {us(s)} per image",
                                     lambda x: (a + s * x) * 1e3, "#d62728"))
    chart = svg_log.draw(svg_log.Chart(
        f"{NAMES[metric]}: paired difference (candidate - baseline) by images per request",
        f"{metric} difference (ms)",
        [svg_log.XSeries("per bucket: median shift, 95% interval", points, COLORS[0])], curves), *span)
    return Panel(metric, chart, "", words, placed, left)


def lookup_chart(rows: list[LookupRow], span: tuple[float, float] | None,
                 roles: dict[str, str]) -> tuple[Markup | None, str]:
    if not rows or span is None:
        return None, ("Lookup work by images per request: not recorded (the servers' telemetry has no "
                      "per-bucket item counts: an older plugin, or no lookup ran).")
    series = []
    for i, arm in enumerate(dict.fromkeys(r.arm for r in rows)):
        pts = [svg_log.XPoint(r.x, r.per_call, note=f"{arm}, {r.bucket}+ images: {r.per_call:.1f} items "
                              f"per call over {r.calls} calls") for r in rows if r.arm == arm]
        series.append(svg_log.XSeries(f"{roles.get(arm, arm)}: items examined per lookup call", pts,
                                      COLORS[i % len(COLORS)], joined=True))
    values = [r.per_call for r in rows if r.per_call > 0]
    log_y = bool(values) and max(values) / min(values) > 20
    chart = svg_log.draw(svg_log.Chart("lookup work inside the servers by images per request",
                                       "items examined per call" + (" (log)" if log_y else ""),
                                       series, (), zero_line=False, log_y=log_y, height=220), *span)
    return chart, ""


def gating(m: MetricLine) -> str:
    """How a line gates, as the policy says it: ``critical``, ``guard`` (a critical gate the policy
    does not require: it fails the run once proven, and holds it while it looks guilty) or
    ``reported``. Never the line's ``critical`` flag in Python spelling: a guard's flag is false
    until it fails, which a reader of the policy's ``critical: true`` cannot tell from a reported
    gate."""
    return "guard" if m.guard else "critical" if m.critical else "reported"


def tail_words(m: MetricLine) -> str:
    """An anytime tail gate in words: its interval and allowance."""
    low, high = (ms(v, unit=False, missing="unbounded") for v in (m.low, m.high))
    span = f"[{low}, {high}] ms"
    est, allowed = ms(m.estimate), ms(m.threshold, signed=False)
    if m.tail_share is not None:  # what the guard proved, per request
        return (f"{m.metric.upper()} {m.statistic} (paired, anytime-valid): requests "
                f"{slowed_span(m.tail_share)}, allowed {share_allowance(m.tail_share)}; "
                f"{m.statistic} of the per-request difference {est} {span}")
    return f"{m.metric.upper()} {m.statistic} (paired, anytime-valid): {est} {span}, allowed {allowed}"


def strata_rows(j: Judgment) -> list[StratumRow]:
    """Every stratum gate, then every anytime tail gate, in the judgment's order."""
    rows = []
    for m in j.metrics:
        if m.kind not in ("stratum", "tail"):
            continue
        text = headline(m) if m.kind == "stratum" else tail_words(m)
        rows.append(StratumRow(m.name, text, m.outcome, gating(m)))
    return rows


def failing_strata(j: Judgment) -> list[dict[str, object]]:
    """The failing stratum and tail gates for ``report.json``'s summary (SI units)."""
    return [{"name": m.name, "kind": m.kind, "stratum": m.stratum, "share": m.share, "metric": m.metric,
             "estimate": m.estimate, "low": m.low, "high": m.high, "threshold": m.threshold,
             "baseline": m.baseline_value, "text": headline(m) if m.kind == "stratum" else tail_words(m)}
            for m in j.metrics if m.kind in ("stratum", "tail") and m.outcome == "fail"]


def effect(j: Judgment) -> Effect:
    rows = lookup_rows(j)
    span = x_range(j, rows)
    roles = {}
    for name, arm in j.arms.items():
        lookup = arm.proven_lookup or arm.expected_lookup
        roles[name] = f"{name} ({lookup})" if lookup else name
    chart, note = lookup_chart(rows, span, roles)
    return Effect([panel(j, m, span) for m in METRICS], chart, note, rows, strata_rows(j))
