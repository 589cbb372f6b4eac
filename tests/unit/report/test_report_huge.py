"""The report of a huge run stays readable (issue 30): a judgment of 20,000 exchanges over
1,250 rounds and 2,500 blocks, mismatching at 1,500 output positions, gives a report.html and
report.md of bounded size that say what they left out; a small run renders as it always did."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import report_runs

from abserve.compare import Judgment
from abserve.compare.model import BreakdownRow, Look
from abserve.model.provenance import SequentialRecord
from abserve.report import capped, svg
from abserve.report.evidence import wanted
from abserve.report.writer import write_report

EXCHANGES, ROUNDS, BLOCKS, POSITIONS = 20_000, 1_250, 2_500, 1_500


def small() -> tuple[Judgment, dict[str, object]]:
    ex = report_runs.exchanges(96, mismatch_at=3)
    j = report_runs.judged(ex)
    return j, {x.request_id: x for x in ex if x.request_id in wanted(j)}


def inflated(j: Judgment) -> Judgment:
    """``j`` as a soak would leave it: every table and chart that grows with the run, grown."""
    j = j.model_copy(deep=True)
    j.exchanges_total = j.exchanges_judged = EXCHANGES
    metrics = sorted({r.metric for r in j.breakdowns})
    j.breakdowns += [BreakdownRow(dimension="block", group=str(k), metric=m, n=8, estimate=1e-4,
                                  low=0.0, high=2e-4) for m in metrics for k in range(BLOCKS)]
    for m in j.metrics:
        if m.trajectory:
            m.trajectory = [Look(n=16 * k, estimate=1e-3, low=1e-3 - 1 / k, high=1e-3 + 1 / k)
                            for k in range(1, ROUNDS + 1)]
    j.provenance.sequential = SequentialRecord.model_validate(report_runs.sequential_log(ROUNDS))
    pair = j.equality[0]
    pair.by_position = {str(p): 1 for p in range(POSITIONS)}
    pair.drift_by_position = {str(p): 2 for p in range(POSITIONS)}
    pair.prompt_sampled, pair.prompt_drifts = EXCHANGES, POSITIONS
    pair.prompt_drift_by_position = {str(p): 3 for p in range(POSITIONS)}
    return j


@pytest.fixture(scope="module")
def huge_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    j, evidence = small()
    paths = write_report(inflated(j), tmp_path_factory.mktemp("huge"), exchanges=evidence)  # type: ignore[arg-type]
    return paths.html.read_text(encoding="utf-8"), paths.markdown.read_text(encoding="utf-8")


def test_a_huge_runs_report_stays_under_a_size_bound(huge_report: tuple[str, str]) -> None:
    html, markdown = huge_report
    assert len(html.encode()) < 300_000
    assert len(markdown.encode()) < 60_000


def test_a_huge_runs_report_says_what_it_left_out(huge_report: tuple[str, str]) -> None:
    html, markdown = huge_report
    for text in (html, markdown):
        assert f"{ROUNDS - capped.MAX_ROWS:,} more rounds not shown: each change of a gate's outcome" in text
        assert "more not shown (report.json has every one)" in text  # the provenance's lists
    blocks = 2 * (12 + BLOCKS - capped.MAX_BLOCK_ROWS)  # tpot and ttft, 12 blocks of the small run
    assert f"{blocks:,} more block rows not shown" in html
    assert f"({svg.MAX_LOOKS_DRAWN} of {ROUNDS:,} looks drawn, evenly spaced)" in html
    assert f"first difference by output position, {POSITIONS:,} positions in {capped.MAX_BARS} ranges" in html
    assert f"{POSITIONS - capped.MAX_LISTED:,} more positions not shown" in html
    assert html.count('<tr><td class="num">') <= capped.MAX_ROWS + 1


def test_a_small_run_renders_exactly_as_without_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    j, evidence = small()
    capped_paths = write_report(j, tmp_path / "capped", exchanges=evidence)  # type: ignore[arg-type]
    for name in ("MAX_ROWS", "MAX_BLOCK_ROWS", "MAX_BARS", "MAX_LISTED"):
        monkeypatch.setattr(capped, name, 10**9)
    monkeypatch.setattr(svg, "MAX_LOOKS_DRAWN", 10**9)
    plain = write_report(j, tmp_path / "plain", exchanges=evidence)  # type: ignore[arg-type]
    for a, b in ((capped_paths.html, plain.html), (capped_paths.markdown, plain.markdown)):
        assert a.read_bytes() == b.read_bytes()
    html = capped_paths.html.read_text(encoding="utf-8")
    assert not any(text in html for text in ("more rounds not shown", "more block rows", "looks drawn"))


def test_changes_of_outcome_are_kept_and_the_rest_evenly_spaced() -> None:
    rows = ["open"] * 500 + ["pass"] * 500
    kept = capped.changes_kept(list(enumerate(rows)), 10, lambda r: r[1])
    indices = [i for i, _ in kept.shown]
    assert len(indices) == 10
    assert kept.left_out == 990
    assert {0, 500, 999} <= set(indices)
    assert indices == sorted(indices)
    assert capped.changes_kept(rows[:10], 10, str).left_out == 0


def test_binned_positions_keep_every_count_in_equal_ranges() -> None:
    counts = {str(p): float(p % 7) for p in range(0, 1000, 3)}
    bins = capped.binned(counts, 40)
    assert len(bins) <= 40
    assert sum(bins.values()) == sum(counts.values())
    assert next(iter(bins)) == "0-24"
    assert capped.binned({"3": 1.0, "9": 2.0}, 40) == {"3": 1.0, "9": 2.0}


def test_long_lists_of_the_provenance_are_cut_around_a_count() -> None:
    cut = capped.long_lists_cut({"blocks": list(range(100)), "seed": [1, 2]}, limit=10)
    assert isinstance(cut, dict)
    assert cut["seed"] == [1, 2]
    assert cut["blocks"][:5] == [0, 1, 2, 3, 4]
    assert cut["blocks"][5] == "... 91 more not shown (report.json has every one) ..."
    assert cut["blocks"][6:] == [96, 97, 98, 99]


@pytest.mark.parametrize("looks", [48, 49, 240, 401, ROUNDS])
def test_a_trajectory_draws_at_most_max_dots_and_marks_the_last_look(looks: int) -> None:
    many = [svg.Point(i, 0.1 * i, 0.1 * i - 1, 0.1 * i + 1) for i in range(1, looks + 1)]
    chart = svg.trajectory(many, [], "t", "y")
    assert chart.count("<circle") <= svg.MAX_DOTS
    assert f"n={looks}:" in chart
    assert ("looks drawn" in chart) == (looks > svg.MAX_LOOKS_DRAWN)
