"""A config's pages of the ledger site, as pure functions of its sign-offs: the trend of each
critical effect across sign-offs (estimate, interval band, allowance line: the report's own
trajectory chart, ``abserve.report.svg``) with the equality history; and what changed since the
last accepted release (``site_changed``).

A trend's points are the config's sign-offs oldest first, one per sign-off that measured the
gate with an interval; the allowance drawn is the newest sign-off's. Tables are capped
(``MAX_TABLE_ROWS`` newest) and say how many older rows are left out; the charts draw every
sign-off (evenly spaced beyond ``svg.MAX_LOOKS_DRAWN``, said under the chart).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup

from abserve.ledger.entry import AcceptedBuild, GateEffect
from abserve.ledger.site_data import SignOff
from abserve.ledger.site_views import build_label, effect_text, signed, unit_of, when
from abserve.report import svg
from abserve.report.svg_parts import COLORS

MAX_TABLE_ROWS = 200
LEGEND = "sign-offs oldest → newest: interval, estimate"


@dataclass(frozen=True)
class Trend:
    """One critical gate across the config's sign-offs."""

    gate: str
    chart: Markup | None  # None: fewer than two sign-offs measured it (``note`` says so)
    caption: str
    note: str = ""


@dataclass(frozen=True)
class HistoryRow:
    """One sign-off of the config's tables (newest first)."""

    run_id: str
    when: str
    verdict: str
    report: str | None
    candidate: str
    effects: list[str]
    equality_outcome: str
    comparable: int
    mismatches: int
    rate: str
    bound: str
    accepted_as: list[str]


@dataclass(frozen=True)
class ConfigPage:
    """A config's trend page."""

    config: str
    count: int
    verdicts: list[tuple[str, int]]
    accepted: AcceptedBuild | None
    trends: list[Trend]
    equality_chart: Markup | None
    rows: list[HistoryRow]
    left_out: int
    changed_page: str
    gates: list[str] = field(default_factory=list)  # the critical gates, the tables' columns


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def critical_gates(signoffs: Sequence[SignOff]) -> list[str]:
    """The critical gate names of the sign-offs, the newest sign-off's order first."""
    names: list[str] = []
    for s in signoffs:
        for g in s.entry.gates if s.entry else []:
            if g.critical and g.name not in names:
                names.append(g.name)
    return names


def _gate(s: SignOff, name: str) -> GateEffect | None:
    return next((g for g in s.entry.gates if g.name == name), None) if s.entry else None


def trend(name: str, signoffs: Sequence[SignOff],
          accepted_as: Mapping[str, list[str]] | None = None) -> Trend:
    """The trend of gate ``name`` across ``signoffs`` (newest first, as the site holds them); the
    caption names the points that are accepted releases (``accepted_as``: run id -> names)."""
    measured = [(s, g) for s in reversed(signoffs)
                if (g := _gate(s, name)) is not None and _finite(g.estimate, g.low, g.high)]
    if not measured:
        return Trend(name, None, "", f"{name}: no sign-off measured it with an interval.")
    newest = measured[-1][1]
    unit, f = unit_of([v for _, g in measured for v in (g.estimate, g.low, g.high, g.threshold)])
    allowance = (f"allowance {signed(newest.threshold, f)} {unit}" if _finite(newest.threshold)
                 else "no allowance")
    names = accepted_as or {}
    releases = [f"{n} is #{i + 1}" for i, (s, _) in enumerate(measured) for n in names.get(s.run_id, [])]
    caption = (f"{len(measured)} sign-off(s) measured it; newest {measured[-1][0].run_id}: "
               f"{effect_text(newest)}; {allowance}."
               + (f" Accepted: {', '.join(releases)}." if releases else ""))
    if len(measured) < 2:
        return Trend(name, None, caption,
                     f"{name}: one sign-off so far, no trend to draw: {effect_text(newest)}.")
    points = [svg.Point(i + 1, g.estimate * f, g.low * f, g.high * f)  # type: ignore[operator]
              for i, (_, g) in enumerate(measured)]
    refs = [svg.Reference(0.0, "no change", color="#777", dash="2,3")]
    if _finite(newest.threshold):
        refs.insert(0, svg.Reference(newest.threshold * f, allowance, color="#c62828"))  # type: ignore[operator]
    chart = svg.trajectory(points, refs, f"{name}: effect across sign-offs (candidate - baseline, {unit})",
                           f"{name} ({unit})", x_label="", legend=LEGEND, tip="sign-off #",
                           points_are="sign-offs")
    return Trend(name, chart, caption)


def equality_chart(signoffs: Sequence[SignOff]) -> Markup | None:
    """The mismatch rate (line) up to its bound (band) across the sign-offs that judged equality,
    in percent; None with fewer than two."""
    judged = [s.entry.equality for s in reversed(signoffs)
              if s.entry and s.entry.equality.outcome is not None and _finite(s.entry.equality.rate)]
    if len(judged) < 2:
        return None
    points = [svg.Point(i + 1, (q.rate or 0.0) * 100, (q.rate or 0.0) * 100,
                        (q.bound if _finite(q.bound) else q.rate or 0.0) * 100)  # type: ignore[operator]
              for i, q in enumerate(judged)]
    return svg.trajectory(points, [svg.Reference(0.0, "", color="#777", dash="2,3")],
                          "equality: candidate mismatch rate and its bound across sign-offs (%)",
                          "mismatch rate (%)", x_label="",
                          legend="sign-offs oldest → newest: rate to bound, rate",
                          tip="sign-off #", points_are="sign-offs",
                          color=COLORS[3])


def _pct(v: float | None) -> str:
    return f"{v:.2%}" if v is not None and math.isfinite(v) else "n/a"


def history_row(s: SignOff, report: str | None, gates: Sequence[str],
                accepted_as: Sequence[str]) -> HistoryRow:
    assert s.entry is not None
    e, q = s.entry, s.entry.equality
    cand = e.arm("candidate")
    return HistoryRow(
        run_id=s.run_id, when=when(s.recorded_at), verdict=e.verdict, report=report,
        candidate=build_label(cand) if cand else "",
        effects=[effect_text(g) if (g := _gate(s, name)) else f"{name}: not measured" for name in gates],
        equality_outcome=q.outcome or "not judged", comparable=q.comparable, mismatches=q.mismatches,
        rate=_pct(q.rate), bound=_pct(q.bound), accepted_as=list(accepted_as),
    )


def config_page(config: str, signoffs: Sequence[SignOff], accepted: Sequence[AcceptedBuild],
                reports: Mapping[str, tuple[str | None, str | None]], changed_page: str) -> ConfigPage:
    """The trend page of ``config`` from its sign-offs (newest first, each with an entry) and
    the accepted builds (newest first; the config's newest is its last accepted release)."""
    gates = critical_gates(signoffs)
    names: dict[str, list[str]] = {}
    for a in accepted:
        names.setdefault(a.run_id, []).append(a.name)
    rows = [history_row(s, reports.get(s.run_id, (None, None))[0], gates, names.get(s.run_id, []))
            for s in signoffs[:MAX_TABLE_ROWS]]
    verdicts = Counter(s.entry.verdict for s in signoffs if s.entry)
    return ConfigPage(
        config=config, count=len(signoffs), verdicts=sorted(verdicts.items()),
        accepted=next((a for a in accepted if a.config_name == config), None),
        trends=[trend(g, signoffs, names) for g in gates], equality_chart=equality_chart(signoffs),
        rows=rows, left_out=max(0, len(signoffs) - MAX_TABLE_ROWS), changed_page=changed_page,
        gates=gates,
    )
