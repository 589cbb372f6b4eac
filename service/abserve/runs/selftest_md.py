"""The selftest's result for people: ``selftest.md`` and the console's expected-vs-actual table.

``abserve.runs.selftest`` runs the experiments and makes the checks; this renders what it
found: the table of expected vs actual verdicts, the experiments as they ran, then each
check's evidence. Pure: a ``SelftestResult`` in, Markdown text or a rich ``Table`` out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from abserve.runs.selftest_checks import SelftestResult


def results_markdown(result: SelftestResult) -> str:
    """The expected-vs-actual table, then each check's evidence."""
    lines = ["# abserve selftest", "", f"Result: **{'OK' if result.ok else 'FAILED'}** "
             f"(exit {result.exit_code}); policy `{result.policy}`.", "",
             "| check | arms | expected | verdict | holds |", "|---|---|---|---|---|"]
    lines += [f"| {c.name} | {c.arms} | {c.expected} | {c.verdict} | {'yes' if c.holds else 'NO'} |"
              for c in result.checks]
    lines += ["", "| experiment | run | seconds | error |", "|---|---|---|---|"]
    lines += [f"| {e.name} | {e.run_id or '-'} | {e.seconds:.0f} | {e.error or ''} |"
              for e in result.experiments]
    for c in result.checks:
        lines += ["", f"## {c.name}: {c.arms}, expected {c.expected}, got {c.verdict}", ""]
        lines += [f"- {d}" for d in c.details]
    return "\n".join(lines) + "\n"


def results_table(result: SelftestResult) -> Table:
    """The console's table: one row per check, whether its expectation held in colour."""
    table = Table(title="abserve selftest: expected vs actual")
    for column in ("check", "arms", "expected", "verdict", "holds"):
        table.add_column(column, no_wrap=True)
    for c in result.checks:
        table.add_row(c.name, c.arms, c.expected, c.verdict, "[green]yes[/]" if c.holds else "[red]NO[/]")
    return table
