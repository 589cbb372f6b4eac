"""JUnit XML for a verdict: the one writer of ``junit.xml`` (a run's gates, a family's candidates).

A CI dashboard shows a test case with no child element as green, one with ``<failure>`` or
``<error>`` as red and one with ``<skipped>`` as neither. What decides red or green is what
decides the sign-off: the critical gates and the verdict (the ``verdict`` case the writers add).
So a case is:

- green when its outcome is ``pass``;
- ``<error type="invalid">`` when it is ``invalid`` (the run could not be judged), critical or not;
- ``<failure type=OUTCOME>`` when it is critical and anything else (``fail``, ``marginal``,
  ``inconclusive``, ``unstable``: nothing was signed off);
- ``<skipped>`` when it is a reported (non-critical) gate that did not pass: the dashboard shows
  it with its outcome and reason without turning a passing run red. Such a gate can still make
  the verdict ``marginal`` ("never silent"); then the ``verdict`` case is the red one.

Every case carries ``outcome`` and ``critical`` properties. The exit code (0 pass, 1 fail,
2 inconclusive/marginal/unstable, 3 invalid) and the file thus agree: a run that exits 0 is
all green or skipped. Pure: strings in, XML text out.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One test case: its name, the outcome it stands for, why, and whether it decides the run."""

    name: str
    outcome: str
    reason: str
    critical: bool = True


def verdict_case(verdict: str, reasons: list[str]) -> Case:
    """The case that is red unless the verdict is ``pass``: what a dashboard gates on."""
    return Case("verdict", verdict, "; ".join(reasons) or f"verdict {verdict}")


def _testcase(suite: ET.Element, classname: str, c: Case) -> str:
    """Add ``c`` to ``suite``; return its kind: ``pass``, ``error``, ``failure`` or ``skipped``."""
    case = ET.SubElement(suite, "testcase", classname=classname, name=c.name)
    props = ET.SubElement(case, "properties")
    ET.SubElement(props, "property", name="outcome", value=c.outcome)
    ET.SubElement(props, "property", name="critical", value=str(c.critical).lower())
    message = f"{c.outcome}: {c.reason}"
    if c.outcome == "pass":
        ET.SubElement(case, "system-out").text = c.reason
        return "pass"
    if c.outcome == "invalid":
        ET.SubElement(case, "error", message=message, type="invalid").text = c.reason
        return "error"
    if not c.critical:
        ET.SubElement(case, "skipped", message=f"{c.outcome} (not critical): {c.reason}")
        return "skipped"
    # fail, marginal, inconclusive, unstable, or anything unknown: never green
    ET.SubElement(case, "failure", message=message, type=c.outcome).text = c.reason
    return "failure"


def junit_suite(suite_name: str, classname: str, cases: list[Case]) -> str:
    """A ``<testsuite>`` document with one ``<testcase>`` per case and its counts."""
    suite = ET.Element("testsuite", name=suite_name)
    kinds = [_testcase(suite, classname, c) for c in cases]
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(kinds.count("failure")))
    suite.set("errors", str(kinds.count("error")))
    suite.set("skipped", str(kinds.count("skipped")))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
