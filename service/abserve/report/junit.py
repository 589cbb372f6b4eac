"""JUnit XML for a verdict: the one writer of ``junit.xml`` (a run's gates, a family's candidates).

CI dashboards read a test case with no child element as green, so only ``pass`` may be one.
Every other outcome is named by its ``type``: ``fail``, ``marginal``, ``inconclusive`` and
``unstable`` are ``<failure>`` (nothing was signed off), ``invalid`` is ``<error>`` (the run
could not be judged); the message says the outcome and its reason. The exit code (0 pass,
1 fail, 2 inconclusive/marginal/unstable, 3 invalid) and the JUnit file thus agree on what is
green. Pure: strings in, XML text out.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

NOT_DECIDED_GREEN = ("fail", "marginal", "inconclusive", "unstable")


@dataclass(frozen=True)
class Case:
    """One test case: its name, the outcome it stands for and why."""

    name: str
    outcome: str
    reason: str


def junit_suite(suite_name: str, classname: str, cases: list[Case]) -> str:
    """A ``<testsuite>`` document with one ``<testcase>`` per case and its counts."""
    suite = ET.Element("testsuite", name=suite_name)
    counts = {"failures": 0, "errors": 0}
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=c.name)
        message = f"{c.outcome}: {c.reason}"
        if c.outcome == "invalid":
            ET.SubElement(case, "error", message=message, type="invalid").text = c.reason
            counts["errors"] += 1
        elif c.outcome == "pass":
            ET.SubElement(case, "system-out").text = c.reason
        else:  # fail, marginal, inconclusive, unstable, or anything unknown: never green
            ET.SubElement(case, "failure", message=message, type=c.outcome).text = c.reason
            counts["failures"] += 1
    suite.set("tests", str(len(cases)))
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("skipped", "0")
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
