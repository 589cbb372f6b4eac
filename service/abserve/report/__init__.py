"""Turn a ``Judgment`` into files people and CI read: HTML, Markdown, JSON and JUnit XML.

The writer's names are imported when first used, so a command that only registers its report
commands (every ``abserve`` command line) does not pay for the judgment and the templates.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abserve.report.writer import ReportPaths, junit_xml, write_report

__all__ = ["ReportPaths", "junit_xml", "write_report"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'abserve.report' has no attribute {name!r}")
    return getattr(importlib.import_module("abserve.report.writer"), name)
