"""Remake the ledger screenshots of the release-workflow docs: ``docs/img/ledger-index.png``,
``ledger-trend.png`` and ``ledger-changed.png``.

A demo store (``tests.support.ledger_site``: ten nightly sign-offs of ``cpu-default``, one
accepted, the last one slower with a server flag more; a few of ``gpu-nightly``; a run still
going and one interrupted) is written as a site by the real ``abserve ledger`` code, and each
page's first screen is shot in headless Chromium (``/usr/bin/chromium``) at 1100x760, then
reduced to a 64-colour palette so each PNG stays small.

    PYTHONPATH=service:. python scripts/ledger_screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from PIL import Image
from tests.support import ledger_site as ls
from tests.support.report_browser import ARGS, CHROMIUM

from abserve.ledger.site_data import read_site
from abserve.ledger.site_writer import write_site
from abserve.store import Store

VIEWPORT = {"width": 1100, "height": 760}
SHOTS = {"index.html": "ledger-index.png", "config-cpu-default.html": "ledger-trend.png",
         "changed-cpu-default.html": "ledger-changed.png"}


def demo_site(root: Path) -> Path:
    """A demo ledger written as a site under ``root``; its folder."""
    db = f"sqlite:///{root / 'abserve.db'}"
    with Store.open(db) as st:
        ls.release_stream(st, root / "reports", n=10, accept_at=6)
        for i in range(3):
            rid = f"gpu-nightly-2026120{2 + i}"
            ls.add_signoff(st, ls.entry(rid, "gpu-nightly", t=ls.T0 + 86_400 * (1 + i),
                                        tpot=(3e-4, 1e-4, 6e-4), ttft=(-2e-3, -5e-3, 1e-3),
                                        report_dir=ls.write_fake_report(root / "reports" / rid, rid)))
        ls.add_run(st, "cpu-default-20261205-0900", ls.T0 + 86_400 * 4 + 32_400, "half-written",
                   experiment="cpu-default")
        data = read_site(db, root / "runs")
    write_site(data, root / "site")
    return root / "site"


def shoot(site: Path, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    made = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for page_name, png in SHOTS.items():
                page = browser.new_page(viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]})
                page.goto((site / page_name).as_uri(), wait_until="load")
                target = out / png
                page.screenshot(path=str(target))
                Image.open(target).convert("RGB").quantize(colors=64).save(target, optimize=True)
                made.append(target)
                page.close()
        finally:
            browser.close()
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ledger-shots-") as tmp:
        for path in shoot(demo_site(Path(tmp)), args.out):
            print(f"{path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
