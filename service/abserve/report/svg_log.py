"""Inline SVG charts against images per request on a log axis (no scripts, no network).

One shape: series of points (optionally with interval whiskers and joined by a line) and
curves (a fitted trend, sampled densely so it reads as a line on the log axis), over a shared
x range so the served effect and the lookup's work inside the servers line up when stacked.
The x axis is log2 (powers-of-two ticks); the y axis is linear, or log10 when asked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

from abserve.report.svg_parts import (
    COLORS,
    HEIGHT,
    PAD_B,
    PAD_L,
    PAD_R,
    PAD_T,
    WIDTH,
    document,
    text,
    y_tick,
    y_title,
)


@dataclass(frozen=True)
class XPoint:
    """One point at ``x`` images per request; ``low``/``high`` draw a whisker when given."""

    x: float
    y: float
    low: float | None = None
    high: float | None = None
    note: str = ""  # the tooltip


@dataclass(frozen=True)
class XSeries:
    name: str
    points: Sequence[XPoint]
    color: str = COLORS[0]
    joined: bool = False  # draw a line through the points


@dataclass(frozen=True)
class XCurve:
    name: str
    f: Callable[[float], float]
    color: str = "#555"
    dash: str = "6,3"


@dataclass(frozen=True)
class Axis:
    """A map from data to pixels: log2 or linear (or log10 for y)."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            lo, hi, v = math.log2(self.lo), math.log2(self.hi), math.log2(max(v, self.lo))
        else:
            lo, hi = self.lo, self.hi
        span = (hi - lo) or 1.0
        return self.a + (v - lo) * (self.b - self.a) / span


@dataclass(frozen=True)
class Chart:
    title: str
    y_label: str
    series: Sequence[XSeries]
    curves: Sequence[XCurve] = field(default_factory=tuple)
    zero_line: bool = True
    log_y: bool = False
    height: int = HEIGHT


def x_ticks(lo: float, hi: float) -> list[float]:
    """Powers of two in ``[lo, hi]``; every other one when there are more than nine."""
    ticks = [2.0**k for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)
             if lo <= 2.0**k <= hi]
    while len(ticks) > 9:
        ticks = ticks[::2]
    return ticks


def _y_range(chart: Chart, xs: Sequence[float]) -> tuple[float, float]:
    ys = [v for s in chart.series for p in s.points for v in (p.y, p.low, p.high)
          if v is not None and math.isfinite(v)]
    ys += [c.f(x) for c in chart.curves for x in xs if math.isfinite(c.f(x))]
    if chart.log_y:
        pos = [y for y in ys if y > 0] or [1.0]
        return min(pos) / 1.3, max(pos) * 1.3
    if chart.zero_line:
        ys.append(0.0)
    lo, hi = min(ys), max(ys)
    pad = 0.06 * ((hi - lo) or abs(hi) or 1.0)
    return lo - pad, hi + pad


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round ticks (1, 2 or 5 times a power of ten apart) inside ``[lo, hi]``."""
    raw = (hi - lo) / max(count - 1, 1) or 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step)
    ticks = [round((first + i) * step, 12) for i in range(count + 2) if (first + i) * step <= hi]
    return ticks or [lo, hi]


def _y_ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0**k for k in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)] or [lo, hi]
    return nice_ticks(lo, hi)


def draw(chart: Chart, x_lo: float, x_hi: float) -> Markup:
    """The chart over ``[x_lo, x_hi]`` images per request (log2 axis)."""
    top = PAD_T + 13 * (len(chart.series) + len(chart.curves))  # the legend sits above the plot
    h = chart.height + top - PAD_T
    sx = Axis(x_lo, x_hi, PAD_L + 10, WIDTH - PAD_R - 10, log=True)
    xs = [p.x for s in chart.series for p in s.points] or [x_lo, x_hi]
    c_lo, c_hi = min(xs), max(xs)  # a curve is drawn over the data's range, not beyond it
    dense = [c_lo * (c_hi / c_lo) ** (i / 80) for i in range(81)]
    y_lo, y_hi = _y_range(chart, dense)
    if chart.log_y:
        sy = Axis(math.log10(y_lo), math.log10(y_hi), h - PAD_B, top)
    else:
        sy = Axis(y_lo, y_hi, h - PAD_B, top)

    def y_of(v: float) -> float:
        return sy(math.log10(max(v, y_lo)) if chart.log_y else v)
    body = [f'<line x1="{PAD_L}" y1="{h - PAD_B}" x2="{WIDTH - PAD_R}" y2="{h - PAD_B}" stroke="#555"/>',
            f'<line x1="{PAD_L}" y1="{top}" x2="{PAD_L}" y2="{h - PAD_B}" stroke="#555"/>']
    for t in x_ticks(x_lo, x_hi):
        x = sx(t)
        body.append(f'<line x1="{x:.1f}" y1="{h - PAD_B}" x2="{x:.1f}" y2="{h - PAD_B + 4}" stroke="#555"/>')
        body.append(text(x, h - PAD_B + 16, f"{t:.0f}"))
    body.append(text((PAD_L + WIDTH - PAD_R) / 2, h - PAD_B + 32, "images per request (log scale)"))
    for t in _y_ticks(y_lo, y_hi, chart.log_y):
        y = y_of(t)
        body += y_tick(y, t)
    body.append(y_title(chart.y_label, (top + h - PAD_B) / 2))
    if chart.zero_line and not chart.log_y and y_lo < 0 < y_hi:
        body.append(f'<line x1="{PAD_L}" y1="{y_of(0):.1f}" x2="{WIDTH - PAD_R}" y2="{y_of(0):.1f}" '
                    'stroke="#999" stroke-dasharray="1,2"/>')
    legend: list[tuple[str, str, str]] = []
    for c in chart.curves:
        pts = " ".join(f"{sx(x):.1f},{y_of(c.f(x)):.1f}" for x in dense if math.isfinite(c.f(x)))
        body.append(f'<polyline class="trend" fill="none" stroke="{c.color}" stroke-width="1.5" '
                    f'stroke-dasharray="{c.dash}" points="{pts}"/>')
        legend.append((c.name, c.color, c.dash))
    for s in chart.series:
        body += _series(s, sx, y_of)
        legend.append((s.name, s.color, ""))
    for i, (name, color, dash) in enumerate(legend):
        y = PAD_T - 6 + 13 * i
        body.append(f'<line x1="{PAD_L + 8}" y1="{y}" x2="{PAD_L + 24}" y2="{y}" stroke="{color}" '
                    f'stroke-width="2" stroke-dasharray="{dash or "none"}"/>')
        body.append(text(PAD_L + 28, y + 4, name, "start", 10))
    return document(body, chart.title, h)


def _series(s: XSeries, sx: Axis, y_of: Callable[[float], float]) -> list[str]:
    out = []
    if s.joined and len(s.points) > 1:
        pts = " ".join(f"{sx(p.x):.1f},{y_of(p.y):.1f}" for p in s.points)
        out.append(f'<polyline fill="none" stroke="{s.color}" stroke-width="2" points="{pts}"/>')
    for p in s.points:
        x, y = sx(p.x), y_of(p.y)
        if p.low is not None and p.high is not None:
            y1, y2 = y_of(p.low), y_of(p.high)
            out.append(f'<line class="whisker" x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" y2="{y2:.1f}" '
                       f'stroke="{s.color}" stroke-width="2"/>')
            for yy in (y1, y2):
                out.append(f'<line x1="{x - 4:.1f}" y1="{yy:.1f}" x2="{x + 4:.1f}" y2="{yy:.1f}" '
                           f'stroke="{s.color}" stroke-width="1.5"/>')
        out.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{s.color}">'
                   f"<title>{escape(p.note)}</title></circle>")
    return out
