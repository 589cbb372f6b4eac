"""The glossary of the report's terms: ``docs/glossary.md``, rendered as ``glossary.html`` beside
every report and linked from ``report.html`` and ``report.md`` (``abserve.report.glossary``)."""

from __future__ import annotations

import re
from html import unescape
from importlib.resources import files
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, provenance, run_info

from abserve.compare import Judgment, Policy, judge
from abserve.report import glossary, write_report

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "docs" / "glossary.md"
# The terms issue 48 names, each the start of a heading of its own (A/A' is "A/A' arm").
ISSUE_TERMS = ("hl", "looks", "anytime-valid", "bounded", "marginal", "inconclusive", "unstable",
               "invalid", "floor", "A/A'", "drift", "close", "divergent", "warm-up", "placement",
               "strata", "Holm", "exchange", "proof")
SWAP = [1, 2, 3, 99, 98, 97, 96, 95]
JUDGED = {  # one judgment per verdict the report can link
    "pass": lambda: judge(run_info(), ab_run(60), Policy()),
    "fail": lambda: judge(run_info(), ab_run(60, itl_shift=0.003), Policy()),
    "marginal": lambda: judge(run_info(), ab_run(60, candidate_tokens={5: SWAP}), Policy()),
    "invalid": lambda: judge(run_info({"a": provenance("linear"), "b": provenance("bisect", proven=None)}),
                             ab_run(60), Policy()),
}


def headings(markdown: str) -> list[str]:
    """The headings of a Markdown text, outside fenced code."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    return re.findall(r"^#{1,6} (.+?)\s*$", text, re.M)


def ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_the_packaged_glossary_is_the_docs_page() -> None:
    packaged = files("abserve.report").joinpath("templates", "glossary.md")
    assert packaged.read_text(encoding="utf-8") == SOURCE.read_text(encoding="utf-8")


def test_every_term_of_the_issue_has_its_heading_and_anchor() -> None:
    heads = headings(SOURCE.read_text())
    _, body, anchors = glossary.rendered()
    for term in ISSUE_TERMS:
        head = next((h for h in heads if h == term or h.startswith(f"{term} ")), None)
        assert head is not None, f"no heading for {term!r}"
        assert glossary.slug(head) in anchors
        assert f'id="{glossary.slug(head)}"' in body
    hl = SOURCE.read_text().split("### hl", 1)[1].split("###", 1)[0]
    assert "Hodges–Lehmann" in hl


def test_the_html_has_every_heading_of_the_markdown_with_githubs_anchor(tmp_path: Path) -> None:
    page = write_report(JUDGED["pass"](), tmp_path).glossary.read_text()
    source = SOURCE.read_text()
    heads = headings(source)
    assert len(heads) == len(set(map(glossary.slug, heads))) > 40  # no anchor twice
    found = dict(re.findall(r'<h[1-6] id="([^"]+)">(.*?)</h[1-6]>', page))
    assert {glossary.slug(h): h for h in heads} == {k: unescape(v) for k, v in found.items()}
    assert glossary.slug("A/A' arm") == "aa-arm"  # as GitHub writes it: docs/glossary.md#aa-arm
    text = unescape(re.sub(r"<[^>]+>", "", page))
    assert "The run's one answer, at the top of the report" in text  # the prose, not only headings
    assert "| code | meaning |" not in text
    assert "<table>" in page


def test_the_glossary_page_fetches_nothing_and_every_link_lands(tmp_path: Path) -> None:
    page = write_report(JUDGED["pass"](), tmp_path).glossary.read_text()
    urls = set(re.findall(r"""(?:src|href)=["']([^"']+)""", page))
    inside = {u for u in urls if u.startswith("#")}
    assert urls - inside == {"data:,", "report.html"}  # its icon and the way back
    assert {u[1:] for u in inside} <= ids(page)
    assert "<script" not in page
    assert not re.search(r"https?://", page)


@pytest.mark.parametrize("verdict", list(JUDGED))
def test_the_report_links_the_glossary_and_each_term_lands(verdict: str, tmp_path: Path) -> None:
    j: Judgment = JUDGED[verdict]()
    assert j.verdict == verdict
    paths = write_report(j, tmp_path)
    assert paths.glossary == tmp_path / "glossary.html"
    html, md = paths.html.read_text(), paths.markdown.read_text()
    terms = set(re.findall(r'href="glossary\.html#([^"]+)"', html))
    terms_md = set(re.findall(r"\(glossary\.html#([^)]+)\)", md))
    assert 'href="glossary.html"' in html
    assert "[glossary](glossary.html)" in md
    assert {verdict, "exit-code", "warm-up"} <= terms  # the first screen's words
    assert {verdict, "exit-code", "hl", "anytime-valid", "floor"} <= terms_md
    assert {"critical", "interval", "allowance", "drift", "close", "divergent", "proof"} <= terms  # tables
    assert terms | terms_md <= ids(paths.glossary.read_text())


def test_an_unknown_term_or_a_repeated_anchor_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyError, match="no term #nonsense"):
        glossary.term_link("nonsense")
    assert glossary.term_link("hl") == "glossary.html#hl"
    monkeypatch.setattr(glossary, "source", lambda: "# G\n\n### drift\n\nx\n\n### Drift\n\ny\n")
    glossary.rendered.cache_clear()
    try:
        with pytest.raises(ValueError, match="two headings have the anchor #drift"):
            glossary.rendered()
    finally:
        glossary.rendered.cache_clear()
