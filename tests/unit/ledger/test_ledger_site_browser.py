"""The ledger site in real headless Chromium (Playwright driving ``/usr/bin/chromium``), as the
report is tested: every page accessible (the report's audit: one h1, no skipped heading, charts
with text alternatives, WCAG AA contrast, no empty panel), nothing requested outside the site,
nothing wider than a 390 px phone or a desktop, every link landing on a file of the site (or a
sign-off's CI pipeline), and the index's filters (by config, arm build and verdict; in the URL's
hash; every row shown without JavaScript). The store holds a half-written run, a running one, one
without a report, an entry of a newer abserve and a torn one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from tests.support import ledger_site as ls
from tests.support.report_browser import DESKTOP, NARROW, audit, launched_chromium

from abserve.ledger.site_data import read_site
from abserve.ledger.site_writer import write_site
from abserve.store import Store

pytestmark = pytest.mark.browser
PIPELINES = "https://github.com/example/vllm/actions/runs/"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ledger")
    db = f"sqlite:///{root / 'abserve.db'}"
    with Store.open(db) as st:
        ls.release_stream(st, root / "reports", n=8)
        for i in range(2):
            rid = f"gpu-nightly-{i}"
            ls.add_signoff(st, ls.entry(rid, "gpu-nightly", t=ls.T0 + 1e5 + i,
                                        report_dir=ls.write_fake_report(root / "reports" / rid, rid)))
        ls.add_run(st, "half", ls.T0 + 2e5, "half-written", experiment="cpu-default")
        ls.add_run(st, "live", ls.T0 + 2e5 + 1, "running", experiment="cpu-default")
        ls.add_run(st, "bare", ls.T0 + 2e5 + 2, experiment="cpu-default")
        ls.add_run(st, "newer", ls.T0 + 2e5 + 3)
        newer = ls.write_fake_report(root / "reports" / "newer", "newer")
        ls.add_entry_row(st, ls.entry("newer", t=ls.T0 + 2e5 + 3),
                         text=f'{{"schema_version": 9, "report_dir": "{newer}"}}')
        data = read_site(db, root / "runs")
    write_site(data, root / "site")
    return root / "site"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium()


def open_page(browser: Any, html: Path, viewport: dict[str, int], js: bool = True,
              hash_: str = "") -> tuple[Any, Any, list[str]]:
    """The page opened with every request recorded and any leaving the machine refused."""
    context = browser.new_context(viewport=viewport, java_script_enabled=js)
    requests: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    context.route("http*://**/*", lambda route: route.abort())
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(html.as_uri() + hash_, wait_until="load")
    assert errors == []
    return context, page, requests


def shown(page: Any) -> list[str]:
    return page.eval_on_selector_all("#signoffs tbody tr:not([hidden]) td:nth-child(2) code",
                                     "cs => cs.map(c => c.textContent)")


@pytest.mark.timeout(180)
def test_every_page_accessible_self_contained_and_every_link_lands(browser: Any, site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert len(pages) == 5  # index, and a trend and a what-changed page per config
    for html in pages:
        for viewport in (DESKTOP, NARROW):
            context, page, requests = open_page(browser, html, viewport)
            assert audit(page) == [], html.name
            assert requests == [html.as_uri()], html.name  # nothing fetched, not even from the site
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"], html.name
            for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"):
                url = urlparse(href)
                if url.scheme == "file":
                    assert Path(unquote(url.path)).is_file(), f"{html.name}: {href}"
                else:
                    assert href.startswith(PIPELINES), f"{html.name}: {href}"
            context.close()
    context, page, _ = open_page(browser, site / "index.html", DESKTOP)
    page.click("text=cpu-default-20261201-0700")
    assert page.title() == "abserve cpu-default-20261201-0700: fail"
    context.close()


@pytest.mark.timeout(180)
def test_index_filters_by_config_build_and_verdict(browser: Any, site: Path) -> None:
    context, page, _ = open_page(browser, site / "index.html", NARROW)
    assert len(shown(page)) == 14
    page.select_option("#f-config", "gpu-nightly")
    assert shown(page) == ["gpu-nightly-1", "gpu-nightly-0"]
    assert page.inner_text("#count") == "2 of 14 sign-offs shown."
    page.select_option("#f-config", "")
    page.select_option("#f-verdict", "fail")
    assert shown(page) == ["cpu-default-20261201-0700"]
    page.select_option("#f-verdict", "")
    page.select_option("#f-build", "vLLM 0.32.0rc3 · vllm/vllm-openai:rc3 · 3333333333")
    assert shown(page) == ["cpu-default-20261201-0300"]
    page.select_option("#f-build", "vLLM 0.31.0")  # every baseline: the rows with an entry
    assert len(shown(page)) == 10
    page.select_option("#f-verdict", "running")
    assert shown(page) == []
    page.select_option("#f-build", "")
    assert shown(page) == ["live"]
    assert page.evaluate("location.hash") == "#verdict=running"
    context.close()
    context, page, _ = open_page(browser, site / "index.html", DESKTOP, hash_="#config=gpu-nightly")
    assert shown(page) == ["gpu-nightly-1", "gpu-nightly-0"]  # a filtered view is a link
    context.close()
    context, page, _ = open_page(browser, site / "index.html", DESKTOP, js=False)
    assert len(shown(page)) == 14  # without a script: every row, and no filter that cannot work
    assert not page.is_visible("#filters")
    context.close()
