"""The fenced code blocks of a Markdown page, each with the headings it sits under.

The GPU journey test (``tests/support/gpu_journey.py``) runs the documented commands exactly
as the pages write them: it reads them from the Markdown here, never from a copy, so a
command changed on a page is the command the test runs, and a block the test does not know is
a failure, not a skip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the headings above it (outermost first), its language (the
    fence's info string, ``""`` when none), its text and the line its fence opens on."""

    page: str
    headings: tuple[str, ...]
    language: str
    text: str
    line: int

    @property
    def section(self) -> str:
        """The innermost heading (``""`` above the first one)."""
        return self.headings[-1] if self.headings else ""

    @property
    def is_shell(self) -> bool:
        """A block of commands: a shell info string or none (YAML and other listings are not run)."""
        return self.language in ("", "sh", "bash", "shell", "console")

    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.section or 'top'})"


def blocks(path: Path, page: str | None = None) -> list[Block]:
    """Every fenced block of the Markdown file ``path``, in order."""
    found: list[Block] = []
    headings: list[tuple[int, str]] = []
    fence: str | None = None
    language, start, lines = "", 0, list[str]()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if fence is not None:
            if line.strip() == fence:
                found.append(Block(page or path.name, tuple(t for _, t in headings), language,
                                   "\n".join(lines) + "\n", start))
                fence = None
            else:
                lines.append(line)
            continue
        opened = FENCE.match(line)
        if opened:
            fence, language, start, lines = opened.group(1), opened.group(2), number, []
            continue
        heading = HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            headings = [(lv, t) for lv, t in headings if lv < level] + [(level, heading.group(2))]
    return found


def in_section(found: list[Block], heading: str) -> list[Block]:
    """The blocks under ``heading`` (at any depth below it)."""
    return [b for b in found if heading in b.headings]
