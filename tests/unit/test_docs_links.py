"""Every relative link of the README and the docs lands: on a file of the repository and, for
a link into a Markdown page, on one of its headings (GitHub's anchors). Files only: no network.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from abserve.report.glossary import slug
from abserve.report.writer import write_glossary

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# Issue 48's files made on other branches (the ledger site's screenshots, the CI examples),
# linked by docs/release-workflow.md: a link may be merged before its file. Remove an entry
# once its file is in the repository.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
EXTERNAL = ("http://", "https://", "mailto:")


def links(page: Path) -> list[str]:
    """The link targets of a Markdown page, outside code blocks and code spans."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page (and explicit ids)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    heads = re.findall(r"^#{1,6} (.+?)\s*#*\s*$", text, re.M)
    found = {slug(re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", h)) for h in heads}
    return found | set(re.findall(r"""\bid=["']([^"']+)""", text))


def broken(page: Path) -> list[str]:
    """The links of ``page`` that land nowhere, each with why."""
    out = []
    for target in links(page):
        if target.startswith(EXTERNAL):
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            out.append(f"{target}: no file {rel}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            out.append(f"{target}: no heading #{fragment} in {rel}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_lands(page: Path) -> None:
    assert broken(page) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    other = tmp_path / "other.md"
    other.write_text("# Other page\n\n## A/A' arm\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#aa-arm) [gone](nothere.md) [bad](other.md#nope) "
                    "`[code](skipped.md)` [web](https://example.org/x) [self](#title)\n\n# Title\n")
    assert broken(page) == ["nothere.md: no file " + str((tmp_path / "nothere.md").resolve()),
                            "other.md#nope: no heading #nope in " + str(other.resolve())]


def test_the_docs_link_the_glossary_the_sample_report_and_the_release_workflow(tmp_path: Path) -> None:
    readme = set(links(ROOT / "README.md"))
    assert {"docs/glossary.md", "docs/sample-report/report.html", "docs/release-workflow.md"} <= readme
    sample = ROOT / "docs" / "sample-report"
    for name in ("report.html", "report.md", "report.json", "junit.xml", "glossary.html"):
        assert (sample / name).is_file(), name
    assert (sample / "glossary.html").read_text() == write_glossary(tmp_path).read_text(), (
        "docs/sample-report/glossary.html is not docs/glossary.md's: run scripts/sample-report.sh --glossary")
    terms = set(re.findall(r'href="glossary\.html#([^"]+)"', (sample / "report.html").read_text()))
    assert terms  # the sample is a report of this version: its terms link its glossary ...
    assert terms <= set(re.findall(r'\bid="([^"]+)"', (sample / "glossary.html").read_text()))  # ... and land
