"""The report's first screen in real headless Chromium (Playwright driving ``/usr/bin/chromium``).

What a release manager sees first, at desktop and phone widths, is screenshotted into the test's
output folder (the paths are printed: run with ``-rP`` to see them) and asserted: the verdict, the
equality result, the per-image effect and the latency sentences all inside the first screen, and
nothing wider than the screen. The page fetches nothing; it is accessible (one h1, no skipped
heading level, every chart an image with a text alternative, text contrast at least WCAG AA);
no chart panel is empty; placement and blocks start collapsed. A report of 5,000 exchanges
(synthetic records judged and written by the real code) loads in under 2 s.

No fallback renderer: without Playwright's driver this test fails rather than passing on less.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import report_runs as rr
from tests.support.report_browser import DESKTOP, NARROW, audit, launched_chromium, open_page

from abserve.compare import Judgment
from abserve.report import write_report
from abserve.report.evidence import wanted
from abserve.report.sentences import first_screen

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium()


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Judgment, Path]]:
    root = tmp_path_factory.mktemp("reports")
    ok = rr.judged()
    ex = rr.exchanges(32, mismatch_at=21)
    ex[21] = rr.corpus_exchange(3, ex[21])  # its images rebuilt from the corpus: thumbnails
    bad = rr.judged(ex, log=rr.sequential_log(2, "decided after 2 rounds: equality failed"))
    evidence = {e.request_id: e for e in ex if e.request_id in wanted(bad)}
    return {"pass": (ok, write_report(ok, root / "pass").html),
            "fail": (bad, write_report(bad, root / "fail", exchanges=evidence).html)}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["pass", "fail"])
def test_first_screen_tells_verdict_effect_and_equality(browser: Any, name: str,
                                                        reports: dict[str, tuple[Judgment, Path]],
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    j, html = reports[name]
    shots = tmp_path_factory.getbasetemp() / "report-screenshots"
    shots.mkdir(exist_ok=True)
    for label, viewport in (("desktop", DESKTOP), ("narrow", NARROW)):
        page, requests = open_page(browser, html, viewport)
        path = shots / f"{name}-{label}.png"
        page.screenshot(path=str(path))  # the first screen only: what is seen before scrolling
        print(f"first screen, {name} run, {label} {viewport['width']}px: {path}")
        assert requests == [html.as_uri()]  # nothing fetched but the page itself
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        verdict = page.locator("#verdict")
        assert verdict.inner_text() == j.verdict.upper()
        assert verdict.is_visible()
        items = page.locator("#first-screen li")
        said = [s.text for s in first_screen(j)]
        assert items.count() == len(said)
        texts = [items.nth(i).inner_text() for i in range(items.count())]
        assert all(t.startswith(s) for t, s in zip(texts, said, strict=True))
        seen = [i for i in range(items.count())
                if (items.nth(i).bounding_box() or {"y": 1e9})["y"] < viewport["height"]]
        if label == "desktop":  # every sentence, and so verdict, equality and per-image effect
            assert seen == list(range(len(said)))
            assert any(t.startswith("Per image, bisect (b) saves") for t in texts)
        else:  # the verdict and the equality result at least
            assert seen[:1] == [0]
            assert texts[0].startswith("Output")
        page.close()


@pytest.mark.timeout(180)
def test_accessible_and_no_empty_panel(browser: Any, reports: dict[str, tuple[Judgment, Path]]) -> None:
    for j, html in reports.values():
        page, _ = open_page(browser, html, DESKTOP)
        assert audit(page) == []
        assert page.locator("svg").count() >= 6
        if j.verdict == "fail":  # the mismatch's thumbnails were decoded and laid out
            widths = page.eval_on_selector_all(".thumbs img", "is => is.map(i => i.naturalWidth)")
            assert widths
            assert all(0 < w <= 64 for w in widths)
        for closed in ("#placement-details", "#breakdown-details"):
            assert page.locator(closed).get_attribute("open") is None
        page.close()


@pytest.mark.timeout(180)
def test_the_audit_catches_a_bad_page(browser: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><h1>t</h1><h3>skipped</h3><p style="color:#bbb">faint</p>'
                   '<div class="charts"></div><figure><svg><text>x: no data</text></svg></figure>'
                   '<a href="#nowhere">x</a></body></html>')
    page, _ = open_page(browser, bad, DESKTOP)
    found = " | ".join(audit(page))
    for problem in ("heading level skipped", "text alternative", "low contrast: P", "empty panel",
                    "empty chart row", "link to nowhere"):
        assert problem in found
    page.close()


@pytest.mark.timeout(600)
def test_a_report_of_5000_exchanges_opens_in_under_2_s(browser: Any, tmp_path: Path) -> None:
    ex = rr.exchanges(5000, mismatch_at=77, hashes=False, tokens=6)
    j = rr.judged(ex, log=rr.sequential_log(20, "decided after 20 rounds"))
    assert j.exchanges_total == 5000
    shown = {e.request_id: e for e in ex if e.request_id in wanted(j)}
    html = write_report(j, tmp_path, exchanges=shown).html
    began = time.perf_counter()
    page, requests = open_page(browser, html, DESKTOP)
    wall = time.perf_counter() - began
    load_ms = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    print(f"5000-exchange report: {html.stat().st_size} bytes, load event at {load_ms:.0f} ms, "
          f"goto {wall:.2f} s")
    assert load_ms < 2000
    assert requests == [html.as_uri()]
    assert page.locator("#verdict").inner_text() == j.verdict.upper()
    page.close()
