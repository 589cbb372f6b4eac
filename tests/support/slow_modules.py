"""``make test-fast`` does not even import a test module that is slow as a whole.

Deselecting by marker happens after collection, and collecting a module imports it: the six
modules that check abserve against vLLM's and torch's own code in-process (their
``pytestmark`` says ``slow``) cost the fast loop ~10 CPU s of importing torch, transformers and
vLLM although none of their tests would run. This plugin skips collecting a module whose
module-level ``pytestmark`` names ``slow`` when the ``-m`` expression is a conjunction that
includes ``not slow`` (every test such a module holds would be deselected anyway); ``make
test`` selects no such expression, so there every one of them is collected and runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SLOW = "slow"
_MODULE_MARK = re.compile(r"^pytestmark\s*=\s*(.+)$", re.M)


def deselects_slow(markexpr: str) -> bool:
    """Whether every test marked slow is deselected by MARKEXPR (a conjunction with ``not slow``)."""
    if not markexpr or re.search(r"\bor\b|[()]", markexpr):
        return False
    conjuncts = [" ".join(part.split()) for part in re.split(r"\band\b", markexpr)]
    return f"not {SLOW}" in conjuncts


def slow_as_a_whole(path: Path) -> bool:
    """Whether the test module at PATH marks all its tests slow (``pytestmark`` at module level)."""
    found = _MODULE_MARK.search(path.read_text(encoding="utf-8"))
    return found is not None and re.search(rf"\bpytest\.mark\.{SLOW}\b", found.group(1)) is not None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if deselects_slow(config.option.markexpr) and slow_as_a_whole(collection_path):
        return True
    return None
