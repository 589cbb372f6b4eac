"""``tests.support.slow_modules``: ``make test-fast`` skips importing modules slow as a whole.

Only a ``-m`` conjunction with ``not slow`` (``make test-fast``'s) skips them; ``make test``'s
lane expressions and a plain run collect them, so every such test still runs in CI.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.slow_modules import deselects_slow, slow_as_a_whole

ROOT = Path(__file__).resolve().parents[2]


def test_only_a_conjunction_with_not_slow_deselects_every_slow_test() -> None:
    fast = re.search(r"^FAST := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert fast is not None
    assert deselects_slow(fast.group(1))
    assert deselects_slow("not server and  not slow")
    for kept in ("", "not vllm and not compose", "vllm and not compose", "slow", "not slow or process",
                 "not (slow and process)", "not slowly"):
        assert not deselects_slow(kept), kept


def test_a_module_is_slow_as_a_whole_only_by_its_module_level_mark(tmp_path: Path) -> None:
    whole = tmp_path / "test_whole.py"
    whole.write_text("import pytest\n\npytestmark = [pytest.mark.process, pytest.mark.slow]\n")
    one = tmp_path / "test_one.py"
    one.write_text("import pytest\n\n\n@pytest.mark.slow\ndef test_x():\n    pass\n")
    assert slow_as_a_whole(whole)
    assert not slow_as_a_whole(one)
    assert slow_as_a_whole(ROOT / "tests" / "unit" / "plugin" / "test_lookup.py")
