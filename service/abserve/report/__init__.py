"""Turn a ``Judgment`` into files people and CI read: HTML, Markdown, JSON and JUnit XML."""

from abserve.report.writer import ReportPaths, junit_xml, write_report

__all__ = ["ReportPaths", "junit_xml", "write_report"]
