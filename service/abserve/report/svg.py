"""Small inline SVG charts for the self-contained HTML report (no scripts, no network).

Four shapes cover every plot the report needs: lines (latency ECDFs per arm), intervals
(paired differences with their confidence intervals and thresholds), bars (divergence by
position or items bucket, lookup telemetry) and trajectories (a sequential gate's estimate
and anytime-valid band at every look, against pairs seen, with its allowance drawn; a run of
hundreds of looks is drawn through evenly spaced ones, and says so). Every
text is XML-escaped; each function returns a ``Markup`` string ready to drop into a Jinja2
template.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from abserve.report import capped
from abserve.report.svg_parts import (
    COLORS,
    HEIGHT,
    PAD_B,
    PAD_L,
    PAD_R,
    PAD_T,
    WIDTH,
    document,
    fmt,
    text,
    y_tick,
    y_title,
)

MAX_DOTS = 48  # look markers drawn per trajectory
MAX_LOOKS_DRAWN = 400  # looks the line and band are drawn through (a soak's hundreds: evenly spaced)


@dataclass(frozen=True)
class IntervalRow:
    """One row of an interval chart: estimate and interval, optional allowed band."""

    label: str
    estimate: float
    low: float | None
    high: float | None
    threshold: float | None = None
    outcome: str = ""


def _scale(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """Linear map of [lo, hi] onto [a, b] as (slope, offset)."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    slope = (b - a) / (hi - lo)
    return slope, a - slope * lo


def _x_axis(lo: float, hi: float, sx: tuple[float, float], y: float, label: str,
            ticks: Sequence[float] | None = None) -> list[str]:
    out = [f'<line x1="{PAD_L}" y1="{y}" x2="{WIDTH - PAD_R}" y2="{y}" stroke="#555"/>']
    for v in ticks if ticks is not None else [lo + (hi - lo) * i / 4 for i in range(5)]:
        x = sx[0] * v + sx[1]
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#555"/>')
        out.append(text(x, y + 16, fmt(v)))
    out.append(text((PAD_L + WIDTH - PAD_R) / 2, y + 32, label))
    return out


def lines(series: Mapping[str, Sequence[tuple[float, float]]], title: str, x_label: str) -> Markup:
    """One polyline per named series of (x, y) points, y in [0, 1] (an ECDF)."""
    pts = [p for s in series.values() for p in s if math.isfinite(p[0])]
    if not pts:
        return empty(title)
    lo, hi = min(p[0] for p in pts), max(p[0] for p in pts)
    sx = _scale(lo, hi, PAD_L, WIDTH - PAD_R)
    sy = _scale(0.0, 1.0, HEIGHT - PAD_B, PAD_T)
    body = _x_axis(lo, hi, sx, HEIGHT - PAD_B, x_label)
    body += [text(PAD_L - 6, sy[0] * v + sy[1] + 4, f"{v:.0%}", "end") for v in (0, 0.5, 1)]
    for i, (name, s) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(
            f"{sx[0] * x + sx[1]:.1f},{sy[0] * y + sy[1]:.1f}" for x, y in s if math.isfinite(x)
        )
        body.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        body.append(f'<rect x="{PAD_L + 8}" y="{PAD_T + 14 * i}" width="10" height="10" fill="{color}"/>')
        body.append(text(PAD_L + 22, PAD_T + 9 + 14 * i, name, "start"))
    return document(body, title)


def intervals(rows: Sequence[IntervalRow], title: str, x_label: str) -> Markup:
    """Estimates with interval whiskers around zero; a dashed mark at each threshold."""
    if not rows:
        return empty(title)
    vals = [0.0]
    for r in rows:
        vals += [v for v in (r.estimate, r.low, r.high, r.threshold) if v is not None]
        vals += [-r.threshold] if r.threshold is not None else []
    vals = [v for v in vals if math.isfinite(v)]
    lo, hi = min(vals), max(vals)
    left = int(min(300, max(170, 6.5 * max(len(f"{r.label} ({r.outcome})") for r in rows) + 16)))
    height = PAD_T + PAD_B + 26 * len(rows)
    sx = _scale(lo, hi, left, WIDTH - PAD_R)
    body = _x_axis(lo, hi, sx, height - PAD_B, x_label)
    zero = sx[1]
    body.append(f'<line x1="{zero:.1f}" y1="{PAD_T}" x2="{zero:.1f}" y2="{height - PAD_B}" stroke="#999"/>')
    for i, r in enumerate(rows):
        y = PAD_T + 13 + 26 * i
        color = {"pass": "#2ca02c", "fail": "#d62728"}.get(r.outcome, "#ff7f0e")
        body.append(text(left - 8, y + 4, f"{r.label} ({r.outcome})", "end"))
        if r.threshold is not None and math.isfinite(r.threshold):
            for t in {r.threshold, -r.threshold}:
                x = sx[0] * t + sx[1]
                body.append(
                    f'<line x1="{x:.1f}" y1="{y - 9}" x2="{x:.1f}" y2="{y + 9}" stroke="#555" '
                    'stroke-dasharray="3,2"/>'
                )
        if r.low is not None and r.high is not None:
            x1, x2 = sx[0] * r.low + sx[1], sx[0] * r.high + sx[1]
            body.append(
                f'<line x1="{x1:.1f}" y1="{y}" x2="{x2:.1f}" y2="{y}" stroke="{color}" stroke-width="3"/>'
            )
        cx = sx[0] * r.estimate + sx[1]
        body.append(f'<circle cx="{cx:.1f}" cy="{y}" r="4" fill="{color}"/>')
    return document(body, title, height)


def bars(values: dict[str, float], title: str, y_label: str) -> Markup:
    """One bar per label (left to right in the given order)."""
    if not values:
        return empty(title)
    top = max(max(values.values()), 0.0) or 1.0
    sy = _scale(0.0, top, HEIGHT - PAD_B, PAD_T)
    width = (WIDTH - PAD_L - PAD_R) / len(values)
    body = [
        f'<line x1="{PAD_L}" y1="{HEIGHT - PAD_B}" x2="{WIDTH - PAD_R}" y2="{HEIGHT - PAD_B}" stroke="#555"/>'
    ]
    body += [text(PAD_L - 6, sy[0] * v + sy[1] + 4, fmt(v), "end") for v in (0.0, top)]
    body.append(text(14, PAD_T + 80, y_label, "middle", 10))
    step = max(1, len(values) // 16)
    for i, (label, v) in enumerate(values.items()):
        x, y = PAD_L + i * width, sy[0] * max(v, 0.0) + sy[1]
        body.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(width - 2, 1):.1f}" '
            f'height="{HEIGHT - PAD_B - y:.1f}" fill="{COLORS[0]}"><title>{escape(label)}: '
            f"{escape(fmt(v))}</title></rect>"
        )
        if i % step == 0:
            body.append(text(x + width / 2, HEIGHT - PAD_B + 14, label, "middle", 10))
    return document(body, title)


def empty(title: str) -> Markup:
    """A placeholder chart saying there is nothing to plot."""
    return document([text(WIDTH / 2, HEIGHT / 2, f"{title}: no data")], title)


@dataclass(frozen=True)
class Reference:
    """A horizontal reference line of a trajectory chart (an allowance, a claim, zero)."""

    value: float
    label: str
    color: str = "#555"
    dash: str = "6,3"


@dataclass(frozen=True)
class Point:
    """One look: pairs seen, the estimate, and its anytime-valid interval (all bounded)."""

    n: float
    estimate: float
    low: float
    high: float


def _y_axis(lo: float, hi: float, sy: tuple[float, float], height: int, label: str) -> list[str]:
    out = [f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{height - PAD_B}" stroke="#555"/>']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        y = sy[0] * v + sy[1]
        out += y_tick(y, v)
    out.append(y_title(label, (PAD_T + height - PAD_B) / 2))
    return out


def trajectory(points: Sequence[Point], refs: Sequence[Reference], title: str, y_label: str,
               x_label: str = "pairs seen (n)", color: str = COLORS[0], height: int = HEIGHT,
               legend: str = "anytime-valid band, estimate", tip: str = "n=",
               points_are: str = "looks") -> Markup:
    """An estimate and its band at every look against pairs seen, with reference lines.

    The band is the anytime-valid interval at each look (shaded), the estimate a line with a
    dot per look; every reference (the allowance, a claim, zero) is a dashed horizontal line
    labelled at its right end. Needs at least two points (``empty`` otherwise). ``legend`` says
    what the band is, ``tip`` starts each dot's tooltip and ``points_are`` names the points (the
    ledger's trend: one point a sign-off).
    """
    pts = [p for p in points if all(math.isfinite(v) for v in (p.n, p.estimate, p.low, p.high))]
    if len(pts) < 2:
        return empty(title)
    looks = len(pts)
    pts = capped.evenly(pts, MAX_LOOKS_DRAWN).shown
    ys = [v for p in pts for v in (p.estimate, p.low, p.high)]
    ys += [r.value for r in refs if math.isfinite(r.value)]
    y_lo, y_hi = min(ys), max(ys)
    span = (y_hi - y_lo) or (abs(y_hi) or 1.0)
    y_lo, y_hi = y_lo - 0.05 * span, y_hi + 0.05 * span
    x_lo, x_hi = min(p.n for p in pts), max(p.n for p in pts)
    sx = _scale(x_lo, x_hi, PAD_L + 8, WIDTH - PAD_R - 8)
    sy = _scale(y_lo, y_hi, height - PAD_B, PAD_T)

    def xy(x: float, y: float) -> str:
        return f"{sx[0] * x + sx[1]:.1f},{sy[0] * y + sy[1]:.1f}"

    ticks = sorted({round(x_lo + (x_hi - x_lo) * i / 4) for i in range(5)})
    body = _x_axis(x_lo, x_hi, sx, height - PAD_B, x_label, ticks)
    body += _y_axis(y_lo, y_hi, sy, height, y_label)
    band = [xy(p.n, p.high) for p in pts] + [xy(p.n, p.low) for p in reversed(pts)]
    body.append(f'<polygon class="band" points="{" ".join(band)}" fill="{color}" fill-opacity="0.18" '
                f'stroke="{color}" stroke-opacity="0.5" stroke-width="1"/>')
    placed: list[float] = []  # label baselines at the right end; a clash goes to the left end
    for r in refs:
        if not math.isfinite(r.value):
            continue
        y = sy[0] * r.value + sy[1]
        body.append(f'<line class="ref" x1="{PAD_L}" y1="{y:.1f}" x2="{WIDTH - PAD_R}" y2="{y:.1f}" '
                    f'stroke="{r.color}" stroke-width="1.5" stroke-dasharray="{r.dash}"/>')
        if not r.label:
            continue
        if any(abs(y - 4 - other) < 12 for other in placed):
            body.append(text(PAD_L + 4, y + 13, r.label, "start", 10))
        else:
            placed.append(y - 4)
            body.append(text(WIDTH - PAD_R - 2, y - 4, r.label, "end", 10))
    line = " ".join(xy(p.n, p.estimate) for p in pts)
    body.append(f'<polyline class="estimate" fill="none" stroke="{color}" stroke-width="2" points="{line}"/>')
    # a long run: a dot (and tooltip) every step-th look, the last one always: MAX_DOTS at most
    step = max(1, math.ceil((len(pts) - 1) / (MAX_DOTS - 1)))
    for p in [*pts[:-1:step], pts[-1]]:
        cx, cy = xy(p.n, p.estimate).split(",")
        body.append(
            f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"><title>{escape(tip)}{p.n:.0f}: '
            f"{escape(fmt(p.estimate))} [{escape(fmt(p.low))}, {escape(fmt(p.high))}]</title></circle>"
        )
    body.append(f'<rect x="{PAD_L}" y="{height - 16}" width="10" height="10" fill="{color}" '
                'fill-opacity="0.3"/>')
    drawn = "" if len(pts) == looks else f" ({len(pts)} of {looks:,} {points_are} drawn, evenly spaced)"
    body.append(text(PAD_L + 14, height - 7, legend + drawn, "start", 10))
    return document(body, title, height)
