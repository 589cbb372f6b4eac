"""scripts/test_times.py: the per-group time table ``make test`` prints from its lanes' XML."""

from __future__ import annotations

import runpy
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
times = runpy.run_path(str(REPO / "scripts" / "test_times.py"))

XML = """<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="tests.unit.compare.test_a" name="x" file="tests/unit/compare/test_a.py" time="1.5"/>
<testcase classname="tests.unit.compare.test_b" name="y" file="tests/unit/compare/test_b.py" time="2.0"/>
<testcase classname="tests.e2e.test_run" name="z" time="30"/>
</testsuite></testsuites>"""


def test_groups_are_folders_and_the_slowest_comes_first(tmp_path: Path) -> None:
    lane = tmp_path / "lane.xml"
    lane.write_text(XML)
    got = times["group_times"]([lane])
    assert got == {"tests/unit/compare": (2, 3.5), "tests/e2e": (1, 30.0)}
    rows = times["table"](got).splitlines()
    assert rows[2] == "| tests/e2e | 1 | 30 |"
    assert rows[-1] == "| all | 3 | 34 |"


def test_no_xml_is_an_error(tmp_path: Path) -> None:
    assert times["main"]([str(tmp_path / "missing.xml")]) == 1
