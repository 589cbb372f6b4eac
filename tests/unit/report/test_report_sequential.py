"""The report of a SEQUENTIAL judgment: trajectories, why the run stopped, units, placement.

Judgments come from ``abserve.compare.judge`` on synthetic exchanges with known answers:
arm b is faster per token by a cost that grows with images per request (so the improvement
and per-item gates have something to show), the arms swap CPU sets every block (placement
controlled) unless told otherwise, and the run's provenance carries the log that
``abserve run`` writes when it judges after every round.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from tests.support.records_factory import arm, exchange, provenance, run_info
from tests.support.report_runs import ITEMS, PLACEMENTS, STOP, TOKENS, policy, sequential_log

from abserve.compare import Judgment, Policy, judge
from abserve.compare.model import Look, MetricLine
from abserve.model.provenance import SequentialRecord
from abserve.model.records import Exchange
from abserve.report import svg, write_report


def exchanges(n: int = 96, *, placed: bool = True, shift: float = 0.0, drift_at: int | None = None,
              seed: int = 3) -> list[Exchange]:
    """b's gap per token = a's + ``shift`` - 2 µs per item (+ noise; + 2 ms from ``drift_at`` on)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        items, block = ITEMS[i % len(ITEMS)], i // 8
        common = 0.012 + rng.normal(0, 0.001)
        gap_b = common + shift - 2e-6 * items + rng.normal(0, 0.0003)
        gap_b += 0.002 if drift_at is not None and i >= drift_at else 0.0
        tags = {"block": str(block)} | ({"placement": PLACEMENTS[block % 4]} if placed else {})
        out.append(exchange(i, [arm("a", TOKENS, ttft=0.4 + rng.normal(0, 0.004), itl=common),
                                arm("b", TOKENS, ttft=0.4 + rng.normal(0, 0.004), itl=gap_b)],
                            items=items, profile="mixed", extra_tags=tags))
    return out


def judged(ex: list[Exchange] | None = None, p: Policy | None = None, *, logged: bool = True) -> Judgment:
    info = run_info({"a": provenance("linear"), "b": provenance("bisect")})
    if logged:
        info.provenance.sequential = SequentialRecord.model_validate(sequential_log())
    return judge(info, ex if ex is not None else exchanges(), p or policy())


@pytest.fixture(scope="module")
def seq() -> Judgment:
    return judged()


def first_screen(html: str) -> str:
    """Everything above the gate table."""
    return html.split('<table id="gates"', 1)[0]


def line(j: Judgment, kind: str) -> MetricLine:
    return next(m for m in j.metrics if m.kind == kind)


def test_the_synthetic_run_is_what_the_tests_assume(seq: Judgment) -> None:
    assert seq.sequential
    assert seq.looks == 6
    assert seq.placement_known  # a look per round of 2 blocks
    kinds = {m.kind for m in seq.metrics}
    assert kinds == {"shift", "improvement", "per_item"}
    assert all(len(m.trajectory) == 6 for m in seq.metrics if m.statistic == "mean")


def test_html_draws_a_trajectory_per_critical_gate_and_claim(seq: Judgment, tmp_path: Path) -> None:
    html = write_report(seq, tmp_path).html.read_text()
    figures = re.findall(r'<figure class="trajectory" id="traj-([^"]+)">', html)
    assert set(figures) == {"tpot.hl", "ttft.hl", "tpot.improvement@128+", "tpot.per_item"}
    section = html.split('id="trajectories"', 1)[1]
    assert section.count('<polygon class="band"') >= 4
    assert section.count('class="estimate"') >= 4
    per_item = section.split('id="traj-tpot.per_item"', 1)[1].split("</figure>", 1)[0]
    assert "µs per item" in per_item
    assert "allowed +0.00 µs per item" in per_item
    tpot = section.split('id="traj-tpot.hl"', 1)[1].split("</figure>", 1)[0]
    assert "allowed increase +" in tpot
    assert 'class="ref"' in tpot
    assert "<details" in tpot
    assert "drift over the run: stable" in tpot  # small drift chart, folded
    # the fixed-sample percentile gate has no trajectory, and says so in one line
    assert "tpot.p99: no trajectory chart: a fixed-sample gate" in html


def test_first_screen_says_why_the_run_stopped_and_where_warmup_was_cut(seq: Judgment,
                                                                        tmp_path: Path) -> None:
    paths = write_report(seq, tmp_path)
    top = first_screen(paths.html.read_text())
    assert f"Stopped: {STOP} (6 rounds, 96 requests, 120 s; budget 540 s)." in top
    assert 'id="warmup"' in top
    assert seq.warmup_detail in top
    assert "Cost per item (tpot):" in top
    assert "µs per item" in top
    assert "placement-unknown" not in top
    html = paths.html.read_text()
    assert '<table id="looks">' in html
    assert html.count("<tr><td class=\"num\">") >= 6
    md = paths.markdown.read_text()
    assert f"- **Stopped:** {STOP} (6 rounds, 96 requests, 120 s; budget 540 s)." in md
    assert f"- **Warm-up:** {seq.warmup_detail}." in md
    assert "Placement not controlled" not in md
    assert "| round | requests | seconds | equality | tpot.hl |" in md


def test_units_per_item_in_microseconds_and_improvements_with_their_stratum(seq: Judgment,
                                                                            tmp_path: Path) -> None:
    paths = write_report(seq, tmp_path)
    md, html = paths.markdown.read_text(), paths.html.read_text()
    assert "n/a ms" not in md
    assert "n/a ms" not in html
    gate_table = md.split("| gate | n |", 1)[1].split("\n\n", 1)[0]
    rows = {r.split("|")[1].strip(): r for r in gate_table.splitlines() if r.startswith("| tpot.")}
    per_item = rows["tpot.per_item"]
    assert re.search(r"\| [+-]\d+\.\d\d \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\] µs per item \|", per_item)
    assert "≤ +0.00 µs per item" in per_item
    assert " ms" not in per_item
    improvement = rows["tpot.improvement@128+ (on >= 128 items) (critical)"]
    assert "| — | — |" in improvement
    assert "faster by ≥ 0.000 ms" in improvement
    gates = html.split('<table id="gates"', 1)[1].split("</table>", 1)[0]
    assert "tpot.improvement@128+ (on &gt;= 128 items)" in gates
    m = line(seq, "per_item")
    assert m.estimate is not None
    assert f"{m.estimate * 1e6:+.2f} µs per item" in gates
    assert "| tpot.hl | 6 | n=" in md
    assert "(stable) |" in md  # the trajectory table


def test_unknown_placement_is_stated_on_the_first_screen(tmp_path: Path) -> None:
    j = judged(exchanges(placed=False), logged=False)
    assert not j.placement_known
    paths = write_report(j, tmp_path)
    top = first_screen(paths.html.read_text())
    assert 'id="placement-unknown"' in top
    assert "placement was not controlled by abserve" in top
    assert "tpot 0.700 ms" in top
    assert "Sequential judgment at 12 looks" in top
    assert "no stop rule" in top
    md = paths.markdown.read_text()
    assert "> **Placement not controlled.** The arms' placement was not controlled by abserve" in md
    assert "allowance plus the assumed placement bias" in md
    tpot = paths.html.read_text().split('id="traj-tpot.hl"', 1)[1].split("</figure>", 1)[0]
    assert "allowance + assumed placement bias" in tpot
    summary = json.loads(paths.json.read_text())["summary"]
    assert summary["placement_known"] is False
    assert "not controlled" in summary["placement_statement"]


def test_unknown_placement_without_an_assumed_bias_says_a_fail_may_be_placement(tmp_path: Path) -> None:
    j = judged(exchanges(placed=False), policy(unknown_placement_bias={}), logged=False)
    md = write_report(j, tmp_path).markdown.read_text()
    assert "assumes no placement bias" in md


def test_an_unstable_drift_is_charted_open_and_a_failure_in_junit(tmp_path: Path) -> None:
    j = judged(exchanges(128, shift=-0.001, drift_at=64), logged=False)
    tpot = next(m for m in j.metrics if m.name == "tpot.hl")
    assert tpot.outcome == "unstable"
    assert tpot.drift is not None
    assert tpot.drift.unstable
    paths = write_report(j, tmp_path)
    fig = paths.html.read_text().split('id="traj-tpot.hl"', 1)[1].split("</figure>", 1)[0]
    drift = fig.split('<div class="drift">', 1)[1]
    assert "drift over the run: unstable" in drift
    assert "(UNSTABLE)" in drift
    assert "allowance" in drift
    assert "<details" not in fig
    assert j.verdict == "inconclusive"
    assert 'class="verdict inconclusive"' in paths.html.read_text()
    case = next(c for c in ET.parse(paths.junit).getroot().iter("testcase") if c.get("name") == "tpot.hl")
    assert case.find("skipped") is None  # never green on a dashboard
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "unstable"
    assert (failure.get("message") or "").startswith("unstable:")


def test_a_gate_with_fewer_than_two_bounded_looks_gets_one_line_not_an_empty_chart(seq: Judgment,
                                                                                   tmp_path: Path) -> None:
    lines = [m.model_copy(update={"trajectory": [Look(n=8, estimate=0.001), Look(n=16, estimate=0.001,
                                                                                 low=-0.01, high=0.01)]})
             if m.name == "ttft.hl" else m for m in seq.metrics]
    html = write_report(seq.model_copy(update={"metrics": lines}), tmp_path).html.read_text()
    assert 'id="traj-ttft.hl"' not in html
    note = "ttft.hl: no trajectory chart: 1 of 2 looks had a bounded interval; a chart needs at least 2."
    assert note in html
    assert ": no data</text>" not in html.split('id="trajectories"', 1)[1].split("<h2>", 1)[0]


def test_a_run_judged_at_one_look_has_notes_and_no_empty_chart_row(tmp_path: Path) -> None:
    unblocked = [x.model_copy(update={"tags": {k: v for k, v in x.tags.items() if k != "block"}})
                 for x in exchanges(placed=False)]  # a look every 10,000 requests: one, at the end
    one = judged(unblocked, policy(look_every=10_000), logged=False)
    assert one.looks == 1
    html = write_report(one, tmp_path).html.read_text()
    section = html.split('id="trajectories"', 1)[1].split("<h2", 1)[0]
    assert '<div class="charts">' not in section
    assert "tpot.hl: no trajectory chart: 1 of 1 looks had a bounded interval" in section


def test_report_json_has_a_summary_beside_the_unchanged_model(seq: Judgment, tmp_path: Path) -> None:
    data = json.loads(write_report(seq, tmp_path).json.read_text())
    s = data["summary"]
    assert s["stop_reason"] == STOP
    assert s["rounds"] == 6
    assert s["decided"] is True
    assert s["sequential"]
    assert s["warmup"] == seq.warmup_detail
    assert s["placement_statement"] is None
    units = {g["name"]: g["unit"] for g in s["gates"]}
    assert units["tpot.per_item"] == "s per item"
    assert units["tpot.hl"] == "s"
    assert Judgment.model_validate(data).model_dump(mode="json") == seq.model_dump(mode="json")


def test_a_fixed_sample_judgment_says_it_was_a_single_look(tmp_path: Path) -> None:
    fixed = Policy.model_validate({"arms": {"floor": None}, "min_samples": 20})
    j = judge(run_info({"a": provenance("linear"), "b": provenance("bisect")}), exchanges(), fixed)
    paths = write_report(j, tmp_path)
    top = first_screen(paths.html.read_text())
    assert "Fixed-sample judgment: a single look at the 96 judged exchanges" in top
    assert 'id="trajectories"' not in paths.html.read_text()
    assert "### Sequential gates" not in paths.markdown.read_text()


def test_trajectory_svg_needs_two_points_and_draws_band_estimate_and_references() -> None:
    one = svg.trajectory([svg.Point(8, 1.0, 0.0, 2.0)], [], "t", "ms")
    assert "no data" in one
    assert "<polygon" not in one
    pts = [svg.Point(8, 1.0, -2.0, 4.0), svg.Point(16, 0.5, -1.0, 2.0), svg.Point(24, 0.4, -0.5, 1.0)]
    chart = svg.trajectory(pts, [svg.Reference(1.5, "allowed <1.5>"), svg.Reference(0.0, "")], "a & b", "ms")
    assert chart.count("<circle") == 3
    assert chart.count('class="ref"') == 2
    assert "allowed &lt;1.5&gt;" in chart
    assert "a &amp; b" in chart
    assert ">8<" in chart
    assert ">24<" in chart  # integer ticks of pairs seen


def test_side_by_side_keeps_each_gates_unit(seq: Judgment, tmp_path: Path) -> None:
    base = judged(exchanges(seed=9)).model_copy(update={"run_id": "rc1"})
    paths = write_report(seq, tmp_path, baseline=base)
    md, html = paths.markdown.read_text(), paths.html.read_text()
    side = md.split("### Side by side", 1)[1].split("\n\n###", 1)[0]
    row = next(r for r in side.splitlines() if r.startswith("| tpot.per_item |"))
    assert row.count("µs per item") == 2
    assert " ms" not in row
    table = html.split('id="side-by-side"', 1)[1].split("</table>", 1)[0]
    assert table.count("µs per item") == 2
    assert "n/a ms" not in table
