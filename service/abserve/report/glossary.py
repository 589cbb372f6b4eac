"""The glossary of the report's terms, as the ``glossary.html`` written beside every report.

One source: ``docs/glossary.md`` in the repository, which is the package file
``abserve/report/templates/glossary.md`` (a symlink in the checkout, copied into the wheel with
the templates, as ``abserve/_configs`` is). It reads on GitHub as it is; here it is rendered to HTML with
markdown-it-py (CommonMark and tables, raw HTML off) and each heading gets the anchor GitHub
gives it (``slug``), so ``glossary.html#hl`` and ``docs/glossary.md#hl`` name the same term
and the report links its terms with ``term_link``. Pure but for reading the packaged file.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from markdown_it import MarkdownIt
from markupsafe import Markup

FILE = "glossary.html"  # written beside report.html; report.md and report.html link to it


def slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading: lower case, words joined by -."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.strip().replace(" ", "-")


def source() -> str:
    """The glossary's Markdown, as packaged."""
    return files("abserve.report").joinpath("templates", "glossary.md").read_text(encoding="utf-8")


@cache
def rendered() -> tuple[str, Markup, tuple[str, ...]]:
    """The glossary's title, its body as HTML (headings carrying their anchors) and the anchors
    in order. A heading whose anchor repeats another's is refused: a link could not say which."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(source())
    anchors: list[str] = []
    title = ""
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open":
            continue
        text = tokens[i + 1].content
        anchor = slug(text)
        if anchor in anchors:
            raise ValueError(f"glossary: two headings have the anchor #{anchor} ({text!r})")
        anchors.append(anchor)
        tok.attrSet("id", anchor)
        title = title or text
    body = md.renderer.render(tokens, md.options, {})
    return title, Markup(body), tuple(anchors)


def term_link(anchor: str) -> str:
    """The report's link to one term (``glossary.html#hl``); an unknown term is a bug in a
    template, refused when the report is rendered."""
    if anchor not in rendered()[2]:
        raise KeyError(f"the glossary has no term #{anchor}")
    return f"{FILE}#{anchor}"
