"""The ledger site's index, as pure functions of the sign-offs read (``abserve.ledger.site_data``).

One ``IndexRow`` per run, newest first: its verdict, config, the arms' builds, the critical
effects and equality in a few words, CI facts, and where its report lies in the site (``None``
with the reason when it has none to link). The filters offer every config, arm build and
verdict present; each row carries the values it matches as ``data-`` attributes, so the page's
small script hides the others and without a script every row is shown.
Also the names the site's files take: a config's pages and a run's report folder, each a
safe file name (``page_name``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from abserve.ledger.entry import AcceptedBuild, ArmBuild, GateEffect, LedgerEntry
from abserve.ledger.site_data import SignOff

NO_CONFIG = "(no config name)"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def page_name(name: str) -> str:
    """A file-name-safe form of ``name``: itself when it is safe, else its safe characters and a
    short hash (two names never share one)."""
    if name and _SAFE.search(name) is None and not name.startswith("."):
        return name
    kept = _SAFE.sub("-", name).strip("-.")[:60] or "x"
    return f"{kept}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def config_of(s: SignOff) -> str:
    return s.config_name or NO_CONFIG


def when(t: float | None) -> str:
    """A Unix time as ``2026-12-06 07:36 UTC`` (empty when unknown)."""
    if t is None or not math.isfinite(t):
        return ""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def build_label(a: ArmBuild) -> str:
    """Which build an arm ran, in a few words: vLLM version, image (or install spec), git SHA."""
    parts = [f"vLLM {a.vllm_version}"] if a.vllm_version else []
    if a.image:
        parts.append(a.image)
    elif a.install:
        parts.append(" ".join(a.install))
    if a.git_sha:
        parts.append(a.git_sha[:10])
    return " · ".join(parts) or f"arm {a.name}"


def unit_of(values: Sequence[float | None]) -> tuple[str, float]:
    """The display unit of a gate's numbers (seconds): ms, or µs when all are below 1 ms."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    return ("µs", 1e6) if finite and max(finite) < 1e-3 else ("ms", 1e3)


def signed(v: float | None, factor: float, places: int = 3) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v * factor:+.{places}g}"


def effect_text(g: GateEffect) -> str:
    """``tpot.hl +0.12 ms [-0.05, +0.31] pass`` (the outcome alone without an estimate)."""
    unit, f = unit_of([g.estimate, g.low, g.high, g.threshold])
    if g.estimate is None:
        return f"{g.name} {g.outcome}"
    band = f" [{signed(g.low, f)}, {signed(g.high, f)}]" if g.low is not None and g.high is not None else ""
    return f"{g.name} {signed(g.estimate, f)} {unit}{band} {g.outcome}"


def equality_text(e: LedgerEntry) -> str:
    q = e.equality
    if q.outcome is None:
        return "equality not judged"
    bound = f", bound {q.bound:.2%}" if q.bound is not None else ""
    return f"equality {q.outcome}: {q.mismatches}/{q.comparable} mismatches{bound}"


@dataclass(frozen=True)
class IndexRow:
    """One row of the index."""

    run_id: str
    when: str
    config: str
    verdict: str  # the verdict, or "" when the run has none to show
    exit_code: int | None
    mark: str | None
    report: str | None  # the report's path in the site, None when there is none to link
    report_note: str | None
    candidate: str
    baseline: str
    flags: str
    effects: list[str]
    equality: str
    requests: str
    ci: str
    pipeline_url: str | None
    accepted_as: list[str]
    builds: list[str]  # the filter values it matches
    filter_verdict: str
    config_page: str | None
    build_ids: list[int] = field(default_factory=list)  # its builds' places in ``Index.builds``


@dataclass(frozen=True)
class Index:
    """The index page: rows, filter choices, and a line per config linking its pages."""

    rows: list[IndexRow]
    configs: list[str]
    builds: list[str]
    verdicts: list[str]
    config_links: list[tuple[str, str, str, int]] = field(default_factory=list)  # name, trend, changed, count
    notes: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)


def _ci(e: LedgerEntry) -> str:
    c = e.ci
    bits = [c.commit[:10] if c.commit else None, c.branch,
            f"PR {c.pull_request}" if c.pull_request else None]
    return " · ".join(b for b in bits if b)


def requests_text(e: LedgerEntry) -> str:
    """``480 judged in 10.0 min`` (hours past two; no duration when unknown)."""
    d = e.duration_s
    if d is None or not math.isfinite(d) or d < 0:
        return f"{e.requests:,} judged"
    dur = f" in {d / 60:.1f} min" if d < 7200 else f" in {d / 3600:,.1f} h"
    return f"{e.requests:,} judged{dur}"


def filter_verdict(s: SignOff) -> str:
    """The verdict a row is filtered by: its own, or its mark's first words."""
    return s.verdict or s.mark or "no report"


def index_row(s: SignOff, report: str | None, report_note: str | None,
              accepted_as: Sequence[str], config_page: str | None) -> IndexRow:
    """The index row of one sign-off; ``report`` its report's path in the site (or None and
    ``report_note`` saying why)."""
    e = s.entry
    cand, base = (e.arm("candidate"), e.arm("baseline")) if e else (None, None)
    builds = sorted({build_label(a) for a in (e.arms if e else [])})
    return IndexRow(
        run_id=s.run_id, when=when(s.recorded_at), config=config_of(s),
        verdict=s.verdict or "", exit_code=s.exit_code, mark=s.mark,
        report=report, report_note=report_note,
        candidate=build_label(cand) if cand else "", baseline=build_label(base) if base else "",
        flags=" ".join(cand.flags_differ) if cand else "",
        effects=[effect_text(g) for g in e.gates if g.critical] if e else [],
        equality=equality_text(e) if e else "", requests=requests_text(e) if e else "",
        ci=_ci(e) if e else "", pipeline_url=e.ci.pipeline_url if e else None,
        accepted_as=list(accepted_as), builds=builds, filter_verdict=filter_verdict(s),
        config_page=config_page,
    )


def index(signoffs: Sequence[SignOff], accepted: Sequence[AcceptedBuild],
          reports: Mapping[str, tuple[str | None, str | None]],
          counts: Mapping[str, int]) -> Index:
    """The index of ``signoffs`` (newest first); ``reports``: run id -> (its report's path in the
    site, or None and why); ``counts``: config name -> sign-offs with an entry (their pages)."""
    names: dict[str, list[str]] = {}
    for a in accepted:
        names.setdefault(a.run_id, []).append(a.name)
    rows = []
    for s in signoffs:
        path, note = reports.get(s.run_id, (None, s.mark))
        config = config_of(s)
        page = f"config-{page_name(config)}.html" if config in counts else None
        rows.append(index_row(s, path, note, names.get(s.run_id, []), page))
    links = [(c, f"config-{page_name(c)}.html", f"changed-{page_name(c)}.html", n)
             for c, n in sorted(counts.items())]
    builds = sorted({b for r in rows for b in r.builds})
    place = {b: i for i, b in enumerate(builds)}
    rows = [replace(r, build_ids=[place[b] for b in r.builds]) for r in rows]
    return Index(
        rows=rows,
        configs=sorted({r.config for r in rows}),
        builds=builds,
        verdicts=sorted({r.filter_verdict for r in rows}),
        config_links=links,
    )


def by_config(signoffs: Sequence[SignOff]) -> dict[str, list[SignOff]]:
    """The sign-offs with a usable entry, per config name (in the order given: newest first)."""
    out: dict[str, list[SignOff]] = {}
    for s in signoffs:
        if s.entry is not None:
            out.setdefault(config_of(s), []).append(s)
    return out
