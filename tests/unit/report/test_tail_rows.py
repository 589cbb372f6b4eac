"""One story per row (issue 58): the gate table shows a tail guard as what the policy says it is,
and a tail row's difference and relative change are the same estimate (they agree in sign)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.stall_runs import judged, run

from abserve.compare import load_policy
from abserve.report import write_report
from abserve.report.views import cells

ROOT = Path(__file__).resolve().parents[3]
POLICY = load_policy(ROOT / "configs/policy/aa-default.yaml")


def test_the_gate_table_names_guards_and_critical_gates_never_a_python_bool(tmp_path: Path) -> None:
    j = judged(run(96), POLICY)
    html = write_report(j, tmp_path / "out").html.read_text()
    table = html[html.index('<table id="gates">'):html.index("</table>", html.index('<table id="gates">'))]
    assert not re.search(r"<td>(True|False)</td>", table)
    assert "<td>tpot.p99</td><td>guard</td>" in table
    assert "<td>tpot.hl</td><td>critical</td>" in table
    assert "<td>itl.hl</td><td>reported</td>" in table


def test_a_tail_rows_difference_and_relative_change_agree_in_sign() -> None:
    for stall in (0.0, 0.3):
        j = judged(run(96, decode_stall=stall, every=5, seed=3), POLICY)
        for m in j.metrics:
            if m.kind != "tail" or m.estimate is None or m.relative is None:
                continue
            assert m.baseline_value is not None
            assert m.relative == m.estimate / m.baseline_value
            row = cells(m)
            assert (row["difference"].startswith("-")) == (row["relative"].startswith("-")), (m.name, row)


def test_a_tail_rows_allowance_is_per_request_and_it_shows_the_share_proven_slowed() -> None:
    j = judged(run(96, decode_stall=0.3, every=5, seed=3), POLICY)
    tail = next(m for m in j.metrics if m.name == "e2e.p99")
    assert tail.threshold is None  # never a level derived from the slowest requests
    row = cells(tail)
    assert row["threshold"] == "at most 1% of requests slowed by more than 10% of their own latency"
    assert tail.tail_share is not None
    assert tail.tail_share.slowed >= 15
    assert re.search(r"slowed \+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\] net \(\d+ slowed, \d+ mirrored of \d+\)",
                     row["difference"]), row["difference"]
