"""``report/summary_md.py``: the first screen as GitHub Markdown for a CI job, always under
GitHub's 65,535-character limit, for two arms and for a family."""

from __future__ import annotations

import re

from tests.support.records_factory import ab_run, provenance, run_info
from tests.unit.compare.test_family import POLICY, three_candidates

from abserve.compare import Judgment, Policy, judge
from abserve.compare.family import judge_family
from abserve.compare.policy import MetricRule
from abserve.report.sentences import first_screen
from abserve.report.summary_md import (
    MAX_CHARS,
    family_summary,
    flags_differ,
    problem_summary,
    run_summary,
)

MIXED = Policy(metrics=(MetricRule(metric="tpot", critical=True),  # ttft: reported, inconclusive
                        MetricRule(metric="ttft", allowed_relative=0.0)))


def judged(**kw: object) -> Judgment:
    return judge(run_info(), ab_run(60, **kw), MIXED)  # type: ignore[arg-type]


def section(md: str, title: str) -> str:
    return md.split(title, 1)[1].split("\n\n**", 1)[0]


def test_a_failing_run_says_its_verdict_sentences_and_critical_gates_with_links() -> None:
    j = judged(itl_shift=0.003)
    md = run_summary(j, "https://ci.example/runs/7")
    assert md.startswith("### abserve sign-off `run-1`: ❌ **FAIL** (exit 1)\n")
    for s in first_screen(j):
        assert f"- {s.text} ([{s.link}](https://ci.example/runs/7/report.html{s.anchor}))" in md
    gates = section(md, "**Critical gates**")
    assert "| tpot.hl | +2.821 ms | [+2.660, +2.991] ms | increase 0.509 ms | ❌ fail |" in gates
    assert "| equality (mismatch rate) | 0.00% | [0.00%, 5.96%] | excess ≤ 0.00% | ✅ pass |" in gates
    assert "ttft.hl" not in gates  # not critical: listed with the reported gates
    assert "| ttft.hl |" in section(md, "**Reported gates that did not pass**")
    assert "**Equality (critical): ✅ pass** — 0 mismatches of 60 comparable requests" in md
    assert "[junit.xml](https://ci.example/runs/7/junit.xml)" in md


def test_a_passing_run_with_only_passing_reported_gates_says_so_in_one_line() -> None:
    j = judge(run_info(), ab_run(60), Policy())
    md = run_summary(j, ".")
    assert "✅ **PASS** (exit 0)" in md
    assert "**Reported gates:** every reported (non-critical) gate passed." in md
    assert "[report.md](report.md)" in md  # "." : links relative to the summary itself


def test_the_arms_table_names_each_build_and_the_flags_that_differ() -> None:
    arms = {"a": provenance("linear"), "b": provenance("bisect")}
    arms["b"].server_args = ["--max-num-seqs", "8", "--port", "8002", "--enforce-eager"]
    j = judge(run_info(arms), ab_run(60, arms=("a", "b")), Policy())
    md = run_summary(j, ".")
    assert "| a | baseline | 0.0-test | proven linear | (baseline) |" in md
    assert "| b | candidate | 0.0-test | proven bisect | `--max-num-seqs 8` `--enforce-eager` |" in md


def test_flags_differ_ignores_ports_and_reads_equals_forms() -> None:
    base = ["--port", "1", "--dtype=float32", "--seed", "0"]
    assert flags_differ(["--port", "2", "--dtype=float32", "--seed", "0"], base) == "—"
    assert flags_differ(["--dtype=bfloat16", "--seed", "0"], base) == "`--dtype bfloat16`"


def test_an_invalid_run_says_why_first() -> None:
    info = run_info({"a": provenance("linear"), "b": provenance("bisect", proven=None)})
    md = run_summary(judge(info, ab_run(60, arms=("a", "b")), Policy()), ".")
    assert "⛔ **INVALID** (exit 3)" in md
    assert "- The run is invalid, so no gate decides anything:" in md


def test_table_cells_cannot_break_the_table() -> None:
    j = judged(itl_shift=0.003)
    lines = [m.model_copy(update={"name": "a|b<script>\nx"}) if m.name == "tpot.hl" else m for m in j.metrics]
    md = run_summary(j.model_copy(update={"metrics": lines}), ".")
    assert "| a\\|b&lt;script> x |" in md


def huge(rows: int) -> Judgment:
    """A judgment with ``rows`` critical stratum gates and very long reasons and sentences."""
    j = judged(itl_shift=0.003)
    tpot = next(m for m in j.metrics if m.name == "tpot.hl")
    strata = [tpot.model_copy(update={"name": f"tpot.hl@profile-{i:05d}", "kind": "stratum",
                                      "stratum": f"profile=p{i:05d}", "reason": "x" * 5_000})
              for i in range(rows)]
    reasons = [f"tpot.hl@profile-{i}: fail — " + "y" * 200 for i in range(rows)]
    return j.model_copy(update={"metrics": [*j.metrics, *strata], "reasons": reasons})


def test_a_huge_judgment_stays_under_githubs_limit_and_counts_what_it_left_out() -> None:
    j = huge(4_000)
    md = run_summary(j, "https://ci.example/a/very/long/path/to/the/report")
    assert len(md) <= MAX_CHARS
    gates = section(md, "**Critical gates**")
    shown = len(re.findall(r"^\| tpot\.hl@profile-", gates, re.M))
    left = int(re.search(r"\*([\d,]+) more rows in \[report\.md\]", gates).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert shown > 100  # the room is used, not given up
    assert shown + left == 4_000
    assert md.rstrip().endswith("[junit.xml](https://ci.example/a/very/long/path/to/the/report/junit.xml)")


def test_a_small_limit_is_kept_too() -> None:
    md = run_summary(huge(50), ".", limit=3_000)
    assert len(md) <= 3_000
    assert "more rows in [report.md](report.md)" in md


def test_a_family_names_each_candidate_its_sentences_and_one_gates_table() -> None:
    run = run_info({name: provenance("linear") for name in ("a", "b", "c", "h")})
    family = judge_family(run, three_candidates(), POLICY, "a", ["b", "c", "h"], None)
    md = family_summary(family, "run-1", "out")
    assert md.startswith("### abserve family sign-off `run-1`: ❌ **FAIL** (exit 1)\n")
    assert "**Multiplicity:** Holm step-down over 3 candidates" in md
    assert "| c | ❌ fail | 0.01667 |" in md
    assert "[vs-c/report.html](out/vs-c/report.html)" in md
    assert "- **a vs h: PASS**" in md
    c_first = first_screen(family.judgments["c"])[0]
    assert f"  - {c_first.text} ([{c_first.link}](out/vs-c/report.html{c_first.anchor}))" in md
    gates = section(md, "**Critical gates**")
    assert re.search(r"^\| c \| tpot\.hl \| \+3\.0\d\d ms \|.*❌ fail \|$", gates, re.M), gates
    assert "| h | tpot.hl |" in gates
    arms = section(md, "**Arms**")
    assert "| a | baseline | 0.0-test | proven linear | (baseline) |" in arms
    assert "| c | candidate |" in arms  # each candidate in its own judgment's role
    assert "| h | candidate |" in arms
    assert md.rstrip().endswith("Full report: [report.md](out/report.md) · [report.json](out/report.json) · "
                                "[junit.xml](out/junit.xml)")  # a family writes no report.html at the top
    assert len(md) <= MAX_CHARS


def test_a_run_without_a_report_says_what_stopped_it() -> None:
    md = problem_summary("run", "run refused", "config\nnot found", 4)
    assert md == "### abserve run: ⛔ **run refused** (exit 4)\n\nconfig not found\n"
