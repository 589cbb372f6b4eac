"""Small inline SVG charts for the self-contained HTML report (no scripts, no network).

Three shapes cover every plot the report needs: lines (latency ECDFs per arm), intervals
(paired differences with their confidence intervals and thresholds) and bars (divergence by
position or items bucket, lookup telemetry). Every text is XML-escaped; each function returns
a ``Markup`` string ready to drop into a Jinja2 template.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 560, 240
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 16, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True)
class IntervalRow:
    """One row of an interval chart: estimate and interval, optional allowed band."""

    label: str
    estimate: float
    low: float | None
    high: float | None
    threshold: float | None = None
    outcome: str = ""


def _fmt(v: float) -> str:
    if v == 0 or 0.01 <= abs(v) < 10_000:
        return f"{v:.3g}"
    return f"{v:.2e}"


def _scale(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """Linear map of [lo, hi] onto [a, b] as (slope, offset)."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    slope = (b - a) / (hi - lo)
    return slope, a - slope * lo


def _svg(body: list[str], title: str, height: int = HEIGHT) -> Markup:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
    )
    return Markup(head + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, anchor: str = "middle", size: int = 11) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif">{escape(s)}</text>'
    )


def _x_axis(lo: float, hi: float, sx: tuple[float, float], y: float, label: str) -> list[str]:
    out = [f'<line x1="{PAD_L}" y1="{y}" x2="{WIDTH - PAD_R}" y2="{y}" stroke="#555"/>']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        x = sx[0] * v + sx[1]
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#555"/>')
        out.append(_text(x, y + 16, _fmt(v)))
    out.append(_text((PAD_L + WIDTH - PAD_R) / 2, y + 32, label))
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
    body += [_text(PAD_L - 6, sy[0] * v + sy[1] + 4, f"{v:.0%}", "end") for v in (0, 0.5, 1)]
    for i, (name, s) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(
            f"{sx[0] * x + sx[1]:.1f},{sy[0] * y + sy[1]:.1f}" for x, y in s if math.isfinite(x)
        )
        body.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        body.append(f'<rect x="{PAD_L + 8}" y="{PAD_T + 14 * i}" width="10" height="10" fill="{color}"/>')
        body.append(_text(PAD_L + 22, PAD_T + 9 + 14 * i, name, "start"))
    return _svg(body, title)


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
    left = 170
    height = PAD_T + PAD_B + 26 * len(rows)
    sx = _scale(lo, hi, left, WIDTH - PAD_R)
    body = _x_axis(lo, hi, sx, height - PAD_B, x_label)
    zero = sx[1]
    body.append(f'<line x1="{zero:.1f}" y1="{PAD_T}" x2="{zero:.1f}" y2="{height - PAD_B}" stroke="#999"/>')
    for i, r in enumerate(rows):
        y = PAD_T + 13 + 26 * i
        color = {"pass": "#2ca02c", "fail": "#d62728"}.get(r.outcome, "#ff7f0e")
        body.append(_text(left - 8, y + 4, f"{r.label} ({r.outcome})", "end"))
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
    return _svg(body, title, height)


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
    body += [_text(PAD_L - 6, sy[0] * v + sy[1] + 4, _fmt(v), "end") for v in (0.0, top)]
    body.append(_text(14, PAD_T + 80, y_label, "middle", 10))
    step = max(1, len(values) // 16)
    for i, (label, v) in enumerate(values.items()):
        x, y = PAD_L + i * width, sy[0] * max(v, 0.0) + sy[1]
        body.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(width - 2, 1):.1f}" '
            f'height="{HEIGHT - PAD_B - y:.1f}" fill="{COLORS[0]}"><title>{escape(label)}: '
            f"{escape(_fmt(v))}</title></rect>"
        )
        if i % step == 0:
            body.append(_text(x + width / 2, HEIGHT - PAD_B + 14, label, "middle", 10))
    return _svg(body, title)


def empty(title: str) -> Markup:
    """A placeholder chart saying there is nothing to plot."""
    return _svg([_text(WIDTH / 2, HEIGHT / 2, f"{title}: no data")], title)
