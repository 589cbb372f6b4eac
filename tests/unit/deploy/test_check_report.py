"""``tests.support.check_report`` (what compose-check asserts of a sign-off), on small real
inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.check_report import check, check_invalid, main


def report(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "verdict": "inconclusive", "exit_code": 2, "run_status": "completed", "exchanges_total": 8,
        "arms": {"a": {"proven_lookup": "linear", "error_rate": 0.0},
                 "b": {"proven_lookup": "bisect", "error_rate": 0.0}},
        "equality": [{"left": "a", "right": "b", "comparable": 8, "summary": {"mismatches": 0}}],
        "provenance": {"blocks": [{"placement_label": "a:gpu0,b:gpu1"},
                                  {"placement_label": "a:gpu1,b:gpu0"}]},
    }
    base.update(changes)
    return base


EXPECT = {"a": "linear", "b": "bisect"}


def test_a_sound_sign_off_passes() -> None:
    assert check(report(), 2, EXPECT, min_exchanges=8, blocks=2) == []


@pytest.mark.parametrize(("changes", "code", "needle"), [
    ({}, 1, "does not match"),
    ({"verdict": "invalid", "exit_code": 3, "invalid_reasons": ["arm b died"]}, 3, "invalid run"),
    ({"run_status": "interrupted"}, 2, "run status"),
    ({"arms": {"a": {"proven_lookup": "linear"}, "b": {"proven_lookup": None}}}, 2, "proved None"),
    ({"arms": {"a": {"proven_lookup": "linear"}}}, 2, "missing"),
    ({"equality": []}, 2, "not compared"),
    ({"equality": [{"left": "a", "right": "b", "comparable": 8, "summary": {"mismatches": 1}}]}, 2,
     "1 mismatches"),
    ({"provenance": {"blocks": [{"placement_label": "a:gpu0,b:gpu1"}] * 2}}, 2, "one placement"),
])
def test_each_shortfall_is_named(changes: dict[str, Any], code: int, needle: str) -> None:
    problems = check(report(**changes), code, EXPECT, blocks=2)
    assert any(needle in p for p in problems), problems


def test_under_batch_noise_only_incomparable_exchanges_count_against_equality() -> None:
    drifted = {"equality": [{"left": "a", "right": "b", "comparable": 32, "summary": {
        "mismatches": 10, "counts": {"drift": 10, "close": 0, "divergent": 0, "incomparable": 0}}}]}
    assert check(report(**drifted), 2, EXPECT, blocks=2, batch_noise=True) == []
    assert any("10 mismatches" in p for p in check(report(**drifted), 2, EXPECT, blocks=2))
    lost = {"equality": [{"left": "a", "right": "b", "comparable": 30, "summary": {
        "mismatches": 2, "counts": {"drift": 0, "incomparable": 2}}}]}
    assert any("2 incomparable" in p for p in check(report(**lost), 2, EXPECT, batch_noise=True))
    none = {"equality": [{"left": "a", "right": "b", "comparable": 0, "summary": {"mismatches": 0}}]}
    assert any("no comparable" in p for p in check(report(**none), 2, EXPECT, batch_noise=True))


def test_main_reads_the_report_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "report.json").write_text(json.dumps(report()))
    assert main([str(tmp_path), "--exit-code", "2", "--expect", "a=linear", "--expect", "b=bisect"]) == 0
    assert "proven a=linear, b=bisect" in capsys.readouterr().out
    assert main([str(tmp_path / "missing"), "--exit-code", "2"]) == 1


INVALID = {"verdict": "invalid", "exit_code": 3, "invalid_reasons": ["arm 'b' failed 12/16 requests"]}


def test_a_fault_case_must_be_invalid_for_its_reason_and_keep_what_was_stored() -> None:
    assert check_invalid(report(**INVALID), 3, "arm 'b' failed", min_exchanges=8) == []
    assert any("expected invalid" in p for p in check_invalid(report(), 2, "arm 'b'"))
    assert any("no invalid reason mentions" in p for p in check_invalid(report(**INVALID), 3, "worker"))
    assert any("acknowledged" in p for p in check_invalid(report(**INVALID), 3, "arm", min_exchanges=9))
    assert check_invalid(report(**INVALID, run_status="interrupted"), 3, "arm") == []  # stopped: ended
    assert any("run status" in p
               for p in check_invalid(report(**INVALID, run_status="running"), 3, "arm"))


def test_main_checks_a_fault_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "report.json").write_text(json.dumps(report(**INVALID)))
    args = [str(tmp_path), "--exit-code", "3", "--invalid-because", "arm 'b'", "--min-exchanges", "8"]
    assert main(args) == 0
    assert "invalid (exit 3) as expected" in capsys.readouterr().out
    assert main([str(tmp_path), "--exit-code", "3", "--invalid-because", "router"]) == 1


def test_an_arm_without_a_lookup_must_be_identified_and_a_decisive_run_must_have_stopped_decided() -> None:
    arms = {"a": {"proven_lookup": None, "proof_detail": "identified (no lookup to prove): vLLM 0.32.0"},
            "b": {"proven_lookup": None, "proof_detail": "unproven: no lookup to prove, and the server "
                                                         "did not say what it ran"}}
    decided = {"decided": True, "stop_reason": "decided after 5 rounds: every critical gate passed"}
    problems = check(report(arms=arms, summary=decided), 2, {"a": "identified", "b": "identified"},
                     decided=True)
    assert problems == ["arm 'b' is not identified by what its server ran: unproven: no lookup to prove, "
                        "and the server did not say what it ran"]
    open_run = {"decided": False, "stop_reason": "time budget of 420 s reached"}
    assert check(report(summary=open_run), 2, EXPECT, decided=True) == [
        "the run did not stop decided: 'time budget of 420 s reached'"]
    assert check(report(summary=open_run), 2, EXPECT) == []  # only asked with decided=True
