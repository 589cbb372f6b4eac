"""The drawing parts every inline SVG chart of the report shares (``svg``, ``svg_log``).

The canvas (``WIDTH``, ``HEIGHT``, the paddings), the series colours, numbers as the axes
print them (``fmt``), the ``<svg>`` document with its title (``document``), escaped text
(``text``) and the y axis's ticks and rotated title (``y_tick``, ``y_title``): one definition,
so two kinds of chart stacked in one report line up and read alike.
"""

from __future__ import annotations

from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 560, 240
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 16, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def fmt(v: float) -> str:
    """A tick's number: three significant digits, or scientific when very large or small."""
    if v == 0 or 0.01 <= abs(v) < 10_000:
        return f"{v:.3g}"
    return f"{v:.2e}"


def document(body: list[str], title: str, height: int = HEIGHT) -> Markup:
    """The chart: an ``<svg>`` of ``WIDTH`` x ``height`` with its accessible title."""
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
    )
    return Markup(head + "".join(body) + "</svg>")


def text(x: float, y: float, s: str, anchor: str = "middle", size: int = 11) -> str:
    """A text element, its content escaped."""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif">{escape(s)}</text>'
    )


def y_tick(y: float, value: float) -> list[str]:
    """A tick on the y axis at pixel ``y``, labelled ``value``."""
    return [f'<line x1="{PAD_L - 4}" y1="{y:.1f}" x2="{PAD_L}" y2="{y:.1f}" stroke="#555"/>',
            text(PAD_L - 6, y + 4, fmt(value), "end", 10)]


def y_title(label: str, mid: float) -> str:
    """The y axis's title, rotated, centred on pixel ``mid``."""
    return (f'<text x="12" y="{mid:.1f}" font-size="10" text-anchor="middle" font-family="sans-serif" '
            f'transform="rotate(-90 12 {mid:.1f})">{escape(label)}</text>')
