"""The report of a conversation run: the prefix-cache finding on the first screen, latency by
turn in its own section; a run without conversations keeps its report as it was."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.conversation_runs import FIRST_TTFT, cached_run, conversation_policy, conversations
from tests.support.records_factory import ab_run, run_info

from abserve.compare import judge
from abserve.report.sentences import first_screen
from abserve.report.writer import write_report

SECTION = "Conversations and the prefix cache"


def test_the_salted_arm_is_named_and_the_finding_is_on_the_first_screen(tmp_path: Path) -> None:
    j = judge(cached_run((10_000, 7_000), (10_000, 0)), conversations(12, later_ttft=FIRST_TTFT),
              conversation_policy())
    texts = [s.text for s in first_screen(j)]
    assert any(t.startswith("Linear+salt-prefix (b) is slower to the first token") for t in texts), texts
    assert any("later turns (67% of traffic): TTFT +" in t for t in texts), texts
    finding = next(s for s in first_screen(j) if s.text.startswith("Prefix-cache hit rates differ"))
    assert (finding.anchor, finding.heading) == ("#conversations", SECTION)
    paths = write_report(j, tmp_path)
    md, html = paths.markdown.read_text(), paths.html.read_text()
    assert f"### {SECTION}" in md
    assert "| later turns | ttft | 24 |" in md
    assert "| b | 10000 | 0 | 0.00% |" in md
    assert 'id="conversations"' in html
    assert '<table id="turns">' in html
    data = json.loads(paths.json.read_text())
    assert data["prefix_cache"]["flagged"] is True
    assert [r["group"] for r in data["turns"]][:2] == ["first turn", "first turn"]


def test_rates_alike_are_reported_below_but_not_on_the_first_screen(tmp_path: Path) -> None:
    j = judge(cached_run((10_000, 7_000), (10_000, 6_900)), conversations(12), conversation_policy())
    assert not any(s.text.startswith("Prefix-cache") for s in first_screen(j))
    assert "Prefix-cache hit rates alike: " in write_report(j, tmp_path).markdown.read_text()


def test_a_run_without_conversations_has_no_section_and_no_new_keys(tmp_path: Path) -> None:
    j = judge(run_info(), ab_run(40), conversation_policy(strata=[]))
    paths = write_report(j, tmp_path)
    assert SECTION not in paths.markdown.read_text()
    assert 'id="conversations"' not in paths.html.read_text()
    data = json.loads(paths.json.read_text())
    assert "turns" not in data
    assert "prefix_cache" not in data
    assert "prefix_cache" not in data["policy"]
