"""Where ``--summary-md FILE`` goes: appended to FILE, links relative to where the report is.

GitHub Actions gives each step a ``$GITHUB_STEP_SUMMARY`` file that steps append to, so the
summary is appended (a blank line before it when FILE already holds text), never overwriting
what an earlier step wrote. The links in it start with ``--summary-link-base`` (a URL or a
path, as published), by default the report directory's path relative to FILE's directory, so a
summary kept beside the report (or published with it) links to it. The text itself is
``abserve.report.summary_md``'s (imported when written: the CLI imports this module for its
options' help).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from abserve.compare.family import FamilyJudgment
    from abserve.compare.model import Judgment

SUMMARY_HELP = ("Also write the first screen as GitHub-flavoured Markdown to this file, APPENDED "
                "(as GitHub's $GITHUB_STEP_SUMMARY expects; under 65,535 characters, so it can be "
                "a pull-request comment too).")
LINK_BASE_HELP = ("With --summary-md: the start of the summary's links to the report files, a URL or "
                  "path where the report is published (default: the report directory relative to "
                  "the summary file's directory).")


@dataclass(frozen=True)
class SummaryTarget:
    """``--summary-md FILE`` and ``--summary-link-base``."""

    file: Path
    link_base: str | None = None

    def base_for(self, report_dir: Path) -> str:
        """The links' start for a report written to ``report_dir``."""
        if self.link_base is not None:
            return self.link_base
        rel = os.path.relpath(report_dir.resolve(), self.file.resolve().parent)
        return Path(rel).as_posix()

    def append(self, text: str) -> Path:
        """Append ``text`` to the file (created, with its folder, when missing)."""
        self.file.parent.mkdir(parents=True, exist_ok=True)
        with self.file.open("a+", encoding="utf-8") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.write("\n")
            f.write(text)
        return self.file


def target(file: Path | None, link_base: str | None) -> SummaryTarget | None:
    """The target of the two options, or None without ``--summary-md``; a link base alone is
    refused (ValueError), as it would be silently ignored."""
    if file is None:
        if link_base is not None:
            raise ValueError("--summary-link-base applies with --summary-md only")
        return None
    return SummaryTarget(file, link_base)


def write_run(t: SummaryTarget, judgment: Judgment, report_dir: Path) -> Path:
    """Append a two-arm sign-off's summary (its report in ``report_dir``)."""
    from abserve.report.summary_md import run_summary

    return t.append(run_summary(judgment, t.base_for(report_dir)))


def write_family(t: SummaryTarget, judged: FamilyJudgment, run_id: str, report_dir: Path) -> Path:
    """Append a family sign-off's summary (its reports under ``report_dir``)."""
    from abserve.report.summary_md import family_summary

    return t.append(family_summary(judged, run_id, t.base_for(report_dir)))


def write_problem(t: SummaryTarget, command: str, what: str, message: str, code: int) -> Path:
    """Append what stopped a command before it wrote a report (refused, failed to start)."""
    from abserve.report.summary_md import problem_summary

    return t.append(problem_summary(command, what, message, code))
