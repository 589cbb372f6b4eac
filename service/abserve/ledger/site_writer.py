"""Write the ledger site: ``index.html``, per config ``config-<name>.html`` (trend) and
``changed-<name>.html`` (what changed since the last accepted release), and every sign-off's
report under ``runs/<run id>/`` (``abserve.ledger.site_reports``).

Every page is one file with inline CSS and SVG; the index's filter is a small inline script
(without it every row is shown). No page asks for anything outside the site, so it works from
``file://`` and from any static host. The views are ``site_views``, ``site_trend`` and
``site_changed``; this module only renders them and writes the files.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from abserve.ledger.site_changed import changed_page
from abserve.ledger.site_data import SignOff, SiteData
from abserve.ledger.site_reports import copy_report
from abserve.ledger.site_trend import config_page
from abserve.ledger.site_views import by_config, index, page_name, when

COPY_THREADS = 8


@dataclass(frozen=True)
class SiteSummary:
    """What was written: counts the command reports."""

    index: Path
    signoffs: int
    configs: int
    reports: int
    marked: int


@functools.cache
def _env() -> Environment:
    """The site's template environment, built once a process (templates compiled once)."""
    return Environment(
        loader=PackageLoader("abserve.ledger", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html.j2",)),
        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )


def copy_reports(data: SiteData, out: Path) -> dict[str, tuple[str | None, str | None]]:
    """Copy each sign-off's report into ``out/runs/<run id>/``; run id -> (its path in the site,
    or None and why there is none)."""

    def one(s: SignOff) -> tuple[str, tuple[str | None, str | None]]:
        if s.report_dir is None and s.entry is None:
            return s.run_id, (None, s.mark)
        folder = page_name(s.run_id)
        problem = copy_report(s.run_id, s.report_dir, out / "runs" / folder)
        return s.run_id, ((f"runs/{folder}/report.html", None) if problem is None else (None, problem))

    with ThreadPoolExecutor(COPY_THREADS) as pool:  # file I/O: threads wait on the disk, not the GIL
        return dict(pool.map(one, data.signoffs))


def write_site(data: SiteData, out: Path, now: float | None = None) -> SiteSummary:
    """Write the whole site of ``data`` into ``out`` (created; files of an earlier site replaced)."""
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    common = {"written": when(time.time() if now is None else now), "stores": data.stores}
    reports = copy_reports(data, out)
    groups = by_config(data.signoffs)
    ix = index(data.signoffs, data.accepted, reports, {c: len(s) for c, s in groups.items()})
    ix.notes.extend(data.notes)
    (out / "index.html").write_text(env.get_template("index.html.j2").render(ix=ix, **common),
                                    encoding="utf-8")
    entries = {s.run_id: s.entry for s in data.signoffs if s.entry is not None}
    for config, signoffs in groups.items():
        trend_name, changed_name = f"config-{page_name(config)}.html", f"changed-{page_name(config)}.html"
        page = config_page(config, signoffs, data.accepted, reports, changed_name)
        (out / trend_name).write_text(env.get_template("config.html.j2").render(
            p=page, accepted_when=when(page.accepted.accepted_at) if page.accepted else "", **common),
            encoding="utf-8")
        changed = changed_page(config, signoffs, data.accepted, entries, reports, trend_name)
        (out / changed_name).write_text(env.get_template("changed.html.j2").render(
            c=changed, latest_when=when(changed.latest.recorded_at),
            accepted_when=when(changed.accepted.accepted_at) if changed.accepted else "", **common),
            encoding="utf-8")
    return SiteSummary(index=out / "index.html", signoffs=len(data.signoffs), configs=len(groups),
                       reports=sum(1 for path, _ in reports.values() if path),
                       marked=sum(1 for s in data.signoffs if s.mark))
