"""The HTML report opened in real headless Chromium: renders, no console errors, shows the verdict.

Uses Playwright driving Debian's ``/usr/bin/chromium``; if Playwright's driver cannot start, falls
back to ``chromium --headless --dump-dom`` with console logging on stderr.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from tests.support.records_factory import ab_run, run_info

from abserve.compare import Policy, judge
from abserve.report import write_report

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
pytestmark = pytest.mark.browser


def render_with_playwright(html: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            console: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            return {
                "verdict": page.inner_text("#verdict"),
                "title": page.title(),
                "svgs": page.locator("svg").count(),
                "svg_width": (page.locator("svg").first.bounding_box() or {"width": 0})["width"],
                "gates": page.locator("#gates tr").count(),
                "side": page.locator("#side-by-side").count(),
                "errors": [c for c in console if c.startswith(("error", "pageerror"))],
                "requests": requests,
            }
        finally:
            browser.close()


# Injected into a copy of the page for the CLI renderer, which has no API to ask the page
# anything: once loaded, the page itself writes what was measured (the first SVG's laid-out
# width; every URL it loaded: resource timing lists network loads, failed ones too, but not
# file: URLs, so the elements that load something are listed as well) into an attribute
# that --dump-dom then shows.
PROBE = (
    "<script>addEventListener('load', () => { const svg = document.querySelector('svg');"
    " const loads = [...document.querySelectorAll("
    "'link[href],script[src],img[src],iframe[src],source[src],embed[src]')]"
    ".map(e => e.href || e.src).filter(u => u && !u.startsWith('data:'));"
    " const seen = performance.getEntriesByType('resource').map(e => e.name);"
    " document.documentElement.dataset.abserveProbe = JSON.stringify({"
    " svg_width: svg ? svg.getBoundingClientRect().width : 0,"
    " requests: [location.href, ...new Set([...loads, ...seen])]}); });</script>"
)


def render_with_cli(html: Path) -> dict[str, Any]:
    probed = html.with_name(f"{html.stem}.probe.html")
    page = html.read_text()
    cut = page.rfind("</body>")
    probed.write_text(page[:cut] + PROBE + page[cut:] if cut >= 0 else page + PROBE)
    proc = subprocess.run(
        [CHROMIUM, *ARGS, "--enable-logging=stderr", "--v=0", "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    dom = proc.stdout
    verdict = dom.split('id="verdict"', 1)[1].split(">", 1)[1].split("<", 1)[0]
    probe = json.loads(unescape(dom.split('data-abserve-probe="', 1)[1].split('"', 1)[0]))
    return {
        "verdict": verdict,
        "title": dom.split("<title>", 1)[1].split("</title>", 1)[0],
        "svgs": dom.count("<svg"),
        "svg_width": probe["svg_width"],
        "gates": dom.split('id="gates"', 1)[1].split("</table>", 1)[0].count("<tr"),
        "side": dom.count('id="side-by-side"'),
        "errors": [line for line in proc.stderr.splitlines() if "CONSOLE" in line],
        "requests": [html.as_uri() if url == probed.as_uri() else url for url in probe["requests"]],
    }


def render(html: Path) -> dict[str, Any]:
    try:
        return render_with_playwright(html)
    except Exception as exc:  # the driver itself could not start: use the browser directly
        if "Executable doesn't exist" in str(exc) or not Path(CHROMIUM).exists():
            raise
        return render_with_cli(html)


@pytest.mark.timeout(120)
def test_report_renders_in_chromium_without_console_errors(tmp_path: Path) -> None:
    j = judge(run_info(), ab_run(60, itl_shift=0.003), Policy())
    base = judge(run_info(run_id="rc1"), ab_run(60, seed=4), Policy())
    paths = write_report(j, tmp_path, baseline=base)
    page = render(paths.html)
    assert page["errors"] == []
    assert page["verdict"] == "FAIL"
    assert "run-1" in str(page["title"])
    assert page["requests"] == [paths.html.as_uri()]  # nothing fetched but the page itself
    assert int(page["svgs"]) >= 8
    assert float(page["svg_width"]) > 100
    assert int(page["gates"]) == 1 + 1 + len(j.metrics)
    assert page["side"] == 1


@pytest.mark.timeout(120)
def test_cli_fallback_renders_the_same_verdict(tmp_path: Path) -> None:
    paths = write_report(judge(run_info(), ab_run(60), Policy()), tmp_path)
    page = render_with_cli(paths.html)
    assert page["verdict"] == "PASS"
    assert page["errors"] == []
    assert page == {**render_with_playwright(paths.html), "errors": []}  # measured alike


@pytest.mark.timeout(120)
def test_cli_fallback_sees_what_a_page_loads_and_how_wide_it_draws(tmp_path: Path) -> None:
    other = tmp_path / "other.css"
    other.write_text("p { color: red }")
    page_path = tmp_path / "page.html"
    page_path.write_text(
        '<html><head><title>t</title><link rel="stylesheet" href="other.css"></head><body>'
        '<p id="verdict">X</p><svg width="321" height="10"></svg>'
        '<table id="gates"><tr></tr></table>'
        '<div style="width:9px;height:9px;background:url(http://127.0.0.1:9/x.png)"></div>'
        '</body></html>'
    )
    page = render_with_cli(page_path)
    assert page["requests"] == [page_path.as_uri(), other.as_uri(), "http://127.0.0.1:9/x.png"]
    assert page["svg_width"] == 321


@pytest.mark.timeout(120)
@pytest.mark.parametrize("renderer", [render_with_playwright, render_with_cli])
def test_the_console_check_catches_a_broken_page(
    tmp_path: Path, renderer: Callable[[Path], dict[str, Any]]
) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<html><head><title>t</title></head><body><p id="verdict">X</p><svg></svg>'
        '<table id="gates"><tr></tr></table><script>undefinedFn();</script></body></html>'
    )
    page = renderer(bad)
    assert any("undefinedFn" in e for e in page["errors"])
