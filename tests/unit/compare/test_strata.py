"""Strata gates: a regression confined to the image-dense requests fails its stratum gate.

The overall shift of a 7% slowdown on 37.5% of the traffic stays within a 5% allowance; the
stratum gate (the same anytime-valid shift on its pairs, Bonferroni over the stratum gates)
fails, the run fails naming the stratum with its share and effect, and an A/A run passes.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.records_factory import exchange
from tests.support.strata_runs import judged, policy, run

from abserve.compare.policy import StratumRule
from abserve.compare.strata import gate_count, headline, label, member, sub_ends
from abserve.report.views import summary


def test_membership_labels_and_recounted_looks() -> None:
    dense = StratumRule(name="dense", tag="items", min=128)
    ex = exchange(0, [], items=256, profile="many-items")
    assert member(ex, dense)
    assert not member(exchange(1, [], items=8), dense)
    assert member(ex, StratumRule(name="p", tag="profile", values=("many-items",)))
    assert not member(ex, StratumRule(name="mid", tag="items", min=16, max=256))
    assert label(dense) == "requests with >= 128 images"
    assert label(StratumRule(name="p", tag="profile", values=("x",))) == "requests with profile x"
    assert sub_ends([True, False, True, True, False], [2, 4, 5]) == [1, 3]


def test_a_regression_on_dense_requests_fails_its_stratum_not_the_overall_shift() -> None:
    j = judged(run(320, dense=0.07))
    overall = next(m for m in j.metrics if m.name == "ttft.hl")
    assert overall.outcome == "pass", overall.reason
    dense = next(m for m in j.metrics if m.name == "ttft.stratum[dense]")
    assert dense.kind == "stratum"
    assert dense.outcome == "fail", dense.reason
    assert dense.share == 0.375
    assert dense.confidence == 1 - 0.05 / 2
    assert dense.reason.startswith("requests with >= 128 images (38% of traffic): ")
    assert headline(dense).startswith("requests with >= 128 images (38% of traffic): TTFT +7% [")
    assert headline(dense).endswith("allowed 5%")
    assert j.verdict == "fail"
    failing = summary(j)["failing_strata"]
    assert isinstance(failing, list)
    assert {f["name"] for f in failing} >= {"ttft.stratum[dense]"}


def test_aa_strata_do_not_fail_and_an_open_guard_blocks_nothing() -> None:
    j = judged(run(160, seed=5))
    lines = [m for m in j.metrics if m.kind == "stratum"]
    assert len(lines) == gate_count(policy()) == 2
    assert all(m.outcome != "fail" for m in lines)
    assert all(m.guard for m in lines)
    assert j.verdict == "pass", j.reasons
    assert summary(j)["failing_strata"] == []


def test_a_required_stratum_must_pass_and_the_fixed_path_judges_strata_too() -> None:
    strict = policy(strata=[{"name": "dense", "min": 128, "metrics": ["tpot"], "required": True}])
    early = judged(run(24, seed=5), strict)
    line = next(m for m in early.metrics if m.kind == "stratum")
    assert line.critical
    assert line.outcome == "inconclusive"
    assert early.verdict == "inconclusive"
    fixed = judged(run(320, dense=0.07), policy(mode="fixed", sequential={}))
    assert next(m for m in fixed.metrics if m.name == "ttft.stratum[dense]").outcome == "fail"


def test_the_report_names_the_failing_stratum_on_its_first_screen(tmp_path: Path) -> None:
    from abserve.report import write_report

    write_report(judged(run(320, dense=0.07)), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "**Strata and tails**" in md
    assert "| ttft.stratum[dense] | requests with >= 128 images (38% of traffic)" in md
    payload = json.loads((tmp_path / "report.json").read_text())
    first = [s["text"] for s in payload["summary"]["sentences"]]
    assert any(s.startswith("Slower where the overall shift does not show it: requests with >= 128 images")
               for s in first), first
    assert 'id="effect-strata"' in (tmp_path / "report.html").read_text()


def test_a_tail_the_overall_shift_shows_too_is_not_called_hidden() -> None:
    from abserve.report.sentences import hidden_sentences

    hidden = judged(run(96, stall_share=0.35))  # a third stalled: the winsorized mean hides it
    assert hidden_sentences(hidden)[0].text.startswith("Slower where the overall shift does not show it: ")
    both = judged(run(96, stall_share=0.9))  # nearly every request: the mean shows it too
    outcomes = {m.name: m.outcome for m in both.metrics}
    assert (outcomes["ttft.hl"], outcomes["ttft.p95"]) == ("fail", "fail")
    [sentence] = hidden_sentences(both)
    assert sentence.text.startswith("Slower on part of the traffic or in its tail: "), sentence.text
    assert "(the overall shift shows it too)" in sentence.text
