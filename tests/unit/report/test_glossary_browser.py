"""The glossary beside a report, in real headless Chromium (Playwright driving ``/usr/bin/chromium``):
accessible (the report's own audit), nothing fetched, no wider than a phone's screen, and a term
clicked in ``report.html`` opens ``glossary.html`` on that term."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import report_runs as rr
from tests.support.report_browser import DESKTOP, NARROW, audit, launched_chromium, open_page

from abserve.report import write_report

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(rr.judged(), tmp_path_factory.mktemp("report")).html


def test_the_glossary_page_is_accessible_and_fits_a_phone(browser: Any, report: Path) -> None:
    page_file = report.with_name("glossary.html")
    for viewport in (DESKTOP, NARROW):
        page, requests = open_page(browser, page_file, viewport)
        assert requests == [page_file.as_uri()]  # nothing fetched but the page itself
        assert audit(page) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        assert page.locator("h3#hl").is_visible()
        page.close()


def test_a_term_of_the_report_opens_the_glossary_on_it(browser: Any, report: Path) -> None:
    page, _ = open_page(browser, report, DESKTOP)
    page.locator("header a.term", has_text="exit code").click()
    page.wait_for_load_state("load")
    assert page.url == report.with_name("glossary.html").as_uri() + "#exit-code"
    term = page.locator("#exit-code")
    assert term.inner_text() == "exit code"
    box = term.bounding_box()
    assert box is not None
    assert 0 <= box["y"] < DESKTOP["height"]  # scrolled to the term
    page.locator("nav a").click()  # and back to the report
    page.wait_for_load_state("load")
    assert page.url == report.as_uri()
    page.close()
