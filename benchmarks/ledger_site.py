"""Speed of ``abserve ledger``: a store of 1,000 sign-offs (SQLite and PostgreSQL) -> the site,
and how soon its index is usable in Chromium.

Targets (issue 48): the site written in at most 10 s; the index usable within 1 s (Chromium's
DOMContentLoaded, and the first filter's response after it).

Each backend gets a fresh store of ``--n`` sign-offs over 4 configs (one accepted release each),
every sign-off with a report folder of a real report's size (a report of ``report_runs.judged``,
its title renamed per run; ~150 KB). Timed: ``abserve ledger --db URL --out DIR`` as a process
(interpreter start, imports, reading, copying every report, rendering) into a new folder, best
and worst of ``--repeat``, then once more over the last site (only new reports are copied: a
nightly job that keeps its site). Then ``index.html`` is opened in headless Chromium
(``/usr/bin/chromium``) ``--repeat`` times: first contentful paint, DOMContentLoaded and load from
the page's timing, and the first filter (the config select changed, rows hidden, laid out)
measured inside the page.

    python -m benchmarks.ledger_site [--n 1000] [--repeat 3] [--backend sqlite --backend postgresql]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import ledger_site as ls
from tests.support import report_runs as rr
from tests.support.postgres import throwaway_postgres
from tests.support.report_browser import ARGS, CHROMIUM, DESKTOP

from abserve.report import write_report
from abserve.store import Store

CONFIGS = ("cpu-default", "gpu-nightly", "pr-check", "long-context")
FILTER_JS = """() => { const s = document.getElementById('f-config');
  s.value = s.options[1].value; const t0 = performance.now();
  s.dispatchEvent(new Event('change', {bubbles: true}));
  const shown = document.querySelectorAll('#signoffs tbody tr:not([hidden])').length;
  void document.body.offsetHeight;  // the layout the change causes
  return {ms: performance.now() - t0, shown}; }"""
NAV_JS = """() => { const n = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  return {dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd, fcp: fcp ? fcp.startTime : -1}; }"""


def template_report(root: Path) -> tuple[Path, str]:
    """One real report (its files are copied per run, the title renamed) and its run id."""
    judged = rr.judged()
    return write_report(judged, root / "template").html.parent, judged.run_id


def fill(url: str, n: int, reports: Path, template: tuple[Path, str]) -> None:
    """``n`` sign-offs, each with a report folder, over ``CONFIGS``; one accepted per config,
    half way through."""
    folder, template_id = template
    html = (folder / "report.html").read_text(encoding="utf-8")
    title = f"<title>abserve {template_id}:"
    with Store.open(url) as st:
        for i in range(n):
            config = CONFIGS[i % len(CONFIGS)]
            run_id = f"{config}-{i:05d}"
            dest = reports / run_id
            dest.mkdir(parents=True)
            (dest / "report.html").write_text(html.replace(title, f"<title>abserve {run_id}:", 1))
            for other in folder.iterdir():  # report.md, report.json, junit.xml, glossary.html
                if other.name != "report.html":
                    os.link(other, dest / other.name)
            cand = ls.arm("b", "candidate", f"0.3{i % 5}.0", image=f"vllm/vllm-openai:n{i // 40}",
                          sha=f"{i:040x}", args=("--max-num-seqs", str(8 + i % 3)))
            e = ls.entry(run_id, config, t=ls.T0 + 600 * i, verdict="fail" if i % 17 == 0 else "pass",
                         tpot=(1e-4 * (i % 7), -2e-4, 5e-4 + 1e-4 * (i % 7)), ttft=(1e-3, -2e-3, 4e-3),
                         mismatches=int(i % 11 == 0), candidate=cand, report_dir=dest)
            ls.add_signoff(st, e)
            if i // len(CONFIGS) == n // (2 * len(CONFIGS)):
                ls.add_accepted(st, e, f"{config}-release", ls.T0 + 600 * i + 60)


def time_cli(url: str, out: Path, repeat: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd() / "service"), os.environ.get(
        "PYTHONPATH", "")])}
    times = []
    for i in range(repeat):  # each into a fresh folder (the last one is ``out``)
        site = out if i == repeat - 1 else out.with_name(f"{out.name}-{i}")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "abserve", "ledger", "--db", url, "--out", str(site)],
                       check=True, env=env, capture_output=True)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "abserve", "ledger", "--db", url, "--out", str(out)],
                   check=True, env=env, capture_output=True)
    times.append(time.perf_counter() - t0)  # written again over the last: only new reports copied
    return times


def time_browser(index: Path, repeat: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    got: dict[str, list[float]] = {"dcl": [], "load": [], "fcp": [], "filter": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for _ in range(repeat):
                page = browser.new_page(viewport={"width": DESKTOP["width"], "height": DESKTOP["height"]})
                page.goto(index.as_uri(), wait_until="load")
                nav = page.evaluate(NAV_JS)
                first = page.evaluate(FILTER_JS)
                assert 0 < first["shown"] < 1000
                got["dcl"].append(nav["dcl"] / 1000)
                got["load"].append(nav["load"] / 1000)
                got["fcp"].append(nav["fcp"] / 1000)
                got["filter"].append(first["ms"] / 1000)
                page.close()
        finally:
            browser.close()
    return got


@contextmanager
def store_url(backend: str, root: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{root / 'abserve.db'}"
        return
    with throwaway_postgres() as server:
        yield server.create_database()


def bench(backend: str, n: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix=f"ledger-{backend}-") as tmp:
        root = Path(tmp)
        with store_url(backend, root) as url:
            run_one(backend, url, root, n, repeat)


def run_one(backend: str, url: str, root: Path, n: int, repeat: int) -> None:
    """Fill the store at ``url``, time the command and the index in Chromium, print one line."""
    t0 = time.perf_counter()
    fill(url, n, root / "reports", template_report(root))
    filled = time.perf_counter() - t0
    cli = time_cli(url, root / "site", repeat)
    index = root / "site" / "index.html"
    size = sum(p.stat().st_size for p in (root / "site").rglob("*") if p.is_file())
    b = time_browser(index, repeat)
    kib, mib = index.stat().st_size / 1024, size / 2**20
    med = {k: statistics.median(v) for k, v in b.items()}
    fresh, again = cli[:-1], cli[-1]
    runs = ", ".join(f"{t:.2f} s" for t in fresh)
    print(f"  abserve ledger runs: {runs}; again over the last {again:.2f} s")
    print(f"{backend}: {n} sign-offs (store filled in {filled:.1f} s); abserve ledger into a new folder "
          f"best {min(fresh):.2f} s, worst {max(fresh):.2f} s, again {again:.2f} s; "
          f"index.html {kib:.0f} KiB, site {mib:.0f} MiB; "
          f"Chromium (median of {repeat}) first contentful paint {med['fcp']:.3f} s, DOMContentLoaded "
          f"{med['dcl']:.3f} s (worst {max(b['dcl']):.3f}), load {med['load']:.3f} s, first filter "
          f"{med['filter'] * 1000:.1f} ms (worst {max(b['filter']) * 1000:.1f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    for backend in args.backend or ["sqlite", "postgresql"]:
        bench(backend, args.n, args.repeat)


if __name__ == "__main__":
    main()
