"""The capacity stage in the report: goodput against offered rate, the knees, the step table.

``capacity_chart`` draws each arm's goodput (SLO-met requests per second) at every offered rate
with its band (the attainment's Clopper-Pearson interval times the rate), the line a server
that meets every request would follow, and each arm's knee with its interval (dashed line,
shaded span). ``capacity_view`` gives the template everything (``None`` without a stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from abserve.compare.capacity import CapacityFinding, Knee
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


@dataclass
class CapacityView:
    finding: CapacityFinding
    chart: Markup | None
    rows: list[dict[str, str]]
    knees: list[dict[str, str]]


def _knee_cells(k: Knee) -> dict[str, str]:
    low = f"{k.low:.3g}" if k.low else "below the lowest rate"
    high = f"{k.high:.3g}" if k.high else "unbounded"
    return {"arm": k.arm, "estimate": f"{k.estimate:.3g}/s" if k.estimate is not None else "—",
            "interval": f"[{low}, {high}]",
            "bracket": f"[{k.held_to or 0:.3g}, {k.broke_at or float('inf'):.3g})",
            "note": k.note}


def capacity_view(capacity: dict[str, Any] | None) -> CapacityView | None:
    """The template's view of ``Judgment.capacity`` (None: no capacity stage)."""
    if not capacity:
        return None
    finding = CapacityFinding.model_validate(capacity)
    rows = []
    for step in finding.steps:
        for arm, st in step.arms.items():
            late = f"{step.lateness_p95_s * 1000:.0f} ms" if step.lateness_p95_s is not None else "—"
            rows.append({"rate": f"{step.rate:.3g}", "arm": arm, "met": f"{st.met}/{st.offered}",
                         "attainment": (f"{st.attainment:.0%} [{st.attainment_low:.0%}, "
                                        f"{st.attainment_high:.0%}]"),
                         "goodput": f"{st.goodput:.3g}", "tokens": f"{st.tokens_per_s:.1f}",
                         "finished": f"{st.finished}/{st.offered}", "queue": f"{st.queue_growth:.3g}",
                         "holds": "holds" if st.holds else "breaks", "late": late})
    return CapacityView(finding, capacity_chart(finding), rows,
                        [_knee_cells(k) for k in finding.knees.values()])


def capacity_chart(finding: CapacityFinding) -> Markup | None:
    """Goodput against offered rate per arm, with bands and knees (None: no step)."""
    if not finding.steps:
        return None
    rates = [s.rate for s in finding.steps]
    x_max = max(rates) * 1.08
    y_max = max(max(rates), *(a.goodput for s in finding.steps for a in s.arms.values())) * 1.08
    w, h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + w * x / x_max

    def py(y: float) -> float:
        return PAD_T + h * (1 - y / y_max)

    body = [f'<line x1="{PAD_L}" y1="{py(0):.1f}" x2="{PAD_L + w}" y2="{py(0):.1f}" stroke="#555"/>',
            f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{py(0):.1f}" stroke="#555"/>',
            f'<line x1="{px(0):.1f}" y1="{py(0):.1f}" x2="{px(min(x_max, y_max)):.1f}" '
            f'y2="{py(min(x_max, y_max)):.1f}" stroke="#999" stroke-dasharray="1,2"/>']
    for frac in (0.0, 0.5, 1.0):
        body += y_tick(py(y_max * frac), y_max * frac)
        body += [text(px(x_max * frac), py(0) + 14, fmt(x_max * frac), size=10)]
    for i, arm in enumerate((finding.baseline, finding.candidate)):
        color = COLORS[i]
        knee = finding.knees.get(arm)
        if knee is not None and knee.estimate is not None:
            lo, hi = knee.low or 0.0, min(knee.high or x_max, x_max)
            body.append(f'<rect x="{px(lo):.1f}" y="{PAD_T}" width="{max(px(hi) - px(lo), 1):.1f}" '
                        f'height="{h}" '
                        f'fill="{color}" opacity="0.08"/>')
            body.append(f'<line x1="{px(knee.estimate):.1f}" y1="{PAD_T}" x2="{px(knee.estimate):.1f}" '
                        f'y2="{py(0):.1f}" stroke="{color}" stroke-dasharray="4,3"/>')
            body.append(text(px(knee.estimate) + 3, PAD_T + 12 + 12 * i, f"knee {arm} {knee.estimate:.3g}/s",
                             "start", 10))
        pts = [(s.rate, s.arms[arm]) for s in finding.steps]
        band = [(px(r), py(a.attainment_high * a.offered / s_window)) for (r, a), s_window in
                zip(pts, [s.window_s for s in finding.steps], strict=True)]
        band += [(px(r), py(a.attainment_low * a.offered / sw)) for (r, a), sw in
                 reversed(list(zip(pts, [s.window_s for s in finding.steps], strict=True)))]
        body.append('<polygon points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in band) +
                    f'" fill="{color}" opacity="0.18"/>')
        body.append('<polyline points="' + " ".join(f"{px(r):.1f},{py(a.goodput):.1f}" for r, a in pts) +
                    f'" fill="none" stroke="{color}" stroke-width="1.5"/>')
        body += [f'<circle cx="{px(r):.1f}" cy="{py(a.goodput):.1f}" r="3" fill="{color}"/>' for r, a in pts]
        role, y_key = "baseline" if i == 0 else "candidate", PAD_T + h - 8 - 12 * i
        body.append(f'<line x1="{PAD_L + w - 100}" y1="{y_key - 4}" x2="{PAD_L + w - 86}" y2="{y_key - 4}" '
                    f'stroke="{color}" stroke-width="2"/>')
        body.append(text(PAD_L + w - 4, y_key, f"{arm} ({role})",
                         "end", 10))
    body.append(text(PAD_L + w / 2, HEIGHT - 8, "offered rate (requests/s)", size=10))
    body.append(y_title("goodput (SLO-met requests/s)", PAD_T + h / 2))
    return document(body, "Goodput against offered rate per arm, with intervals and knees")
