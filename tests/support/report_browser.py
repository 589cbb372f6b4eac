"""Opening a report in headless Chromium (Playwright driving ``/usr/bin/chromium``) and auditing it.

``open_page`` records every request the page makes; ``audit`` lists every accessibility or
empty-panel problem (one h1 first, no skipped heading level, every chart an image with a text
alternative, no img without alt, WCAG AA text contrast, no empty panel or chart row, every
in-page link lands); ``first_screen`` screenshots what is seen before scrolling and returns the
first-screen sentences that are inside it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
DESKTOP = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}
# Contrast of every visible text against its nearest opaque background (WCAG 2 formula).
CONTRAST_JS = """() => {
  const lum = (c) => { const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map(v => {
      v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bg = (el) => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
      const a = c.match(/[\\d.]+/g); if (a && (a.length < 4 || Number(a[3]) > 0.5)) return c; }
    return 'rgb(255, 255, 255)'; };
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') || (el.closest('details:not([open])') && !el.closest('summary'))) continue;
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const s = getComputedStyle(el), l1 = lum(s.color), l2 = lum(bg(el));
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(s.fontSize), bold = Number(s.fontWeight) >= 700;
    const need = (size >= 24 || (bold && size >= 18.66)) ? 3 : 4.5;
    if (ratio < need) bad.push(`${el.tagName} "${el.textContent.trim().slice(0, 40)}" ${ratio.toFixed(2)}`);
  }
  return bad;
}"""

PANELS_JS = """() => [...document.querySelectorAll('figure')].map(f => {
  const svg = f.querySelector('svg');
  return {id: f.id, svg: !!svg,
          marks: svg ? svg.querySelectorAll('circle, rect, polyline, polygon').length : 0,
          text: f.textContent.includes('no data')};
})"""


def open_page(browser: Any, html: Path, viewport: dict[str, int]) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport=viewport)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html.as_uri(), wait_until="load")
    return page, requests


def audit(page: Any) -> list[str]:
    """Every accessibility or empty-panel problem of the open page (empty: none)."""
    problems: list[str] = []
    tags = page.eval_on_selector_all("h1,h2,h3,h4,h5,h6", "hs => hs.map(h => h.tagName)")
    levels = [int(t[1]) for t in tags]
    if levels.count(1) != 1 or levels[:1] != [1]:
        problems.append(f"headings start {levels[:3]}: one h1 first expected")
    problems += [f"heading level skipped: h{a} then h{b}" for a, b in itertools.pairwise(levels)
                 if b - a > 1]
    svgs = page.eval_on_selector_all(
        "svg", "ss => ss.map(s => [s.getAttribute('role'), s.getAttribute('aria-label'), "
               "s.querySelector('title') && s.querySelector('title').textContent])")
    problems += [f"chart without a text alternative: {svg}" for svg in svgs
                 if not (svg[0] == "img" and svg[1] and svg[2])]
    if page.eval_on_selector_all("img:not([alt])", "is => is.length"):
        problems.append("img without alt")
    problems += [f"low contrast: {c}" for c in page.evaluate(CONTRAST_JS)]
    problems += [f"empty panel: {p}" for p in page.evaluate(PANELS_JS)
                 if not p["svg"] or not p["marks"] or p["text"]]
    if page.eval_on_selector_all(".charts", "cs => cs.filter(c => !c.children.length).length"):
        problems.append("empty chart row")
    links = page.eval_on_selector_all("a[href^='#']", "as => as.map(a => a.getAttribute('href'))")
    problems += [f"link to nowhere: {h}" for h in links if page.locator(f'[id="{h[1:]}"]').count() != 1]
    return problems


def first_screen(page: Any, shot: Path) -> list[str]:
    """Screenshot the viewport into ``shot``; the first-screen sentences fully inside it."""
    page.screenshot(path=str(shot))
    height = page.viewport_size["height"]
    items = page.locator("#first-screen li")
    seen = []
    for i in range(items.count()):
        box = items.nth(i).bounding_box()
        if box is not None and box["y"] + box["height"] <= height:
            seen.append(items.nth(i).inner_text())
    return seen


def launched_chromium() -> Iterator[Any]:
    """Playwright driving Debian's Chromium, closed when the fixture that yields from it ends."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
