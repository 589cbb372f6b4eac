"""Equality of saved runs: matched by prompt key, not position; every unmatched request counted."""

from __future__ import annotations

import random

from abserve.compare.policy import Policy
from abserve.saved.judge import equality_lines
from abserve.saved.matching import OutputMatcher, first_difference
from abserve.saved.model import SavedRequest


def req(key: str | None, ids: tuple[int, ...] | None = None, text: str | None = None,
        ok: bool = True) -> SavedRequest:
    return SavedRequest(ok=ok, ttft=0.1, prompt_key=key, output_token_ids=ids, output_text=text)


def test_first_difference() -> None:
    assert first_difference("abc", "abc") is None
    assert first_difference("abc", "abd") == 2
    assert first_difference("ab", "abc") == 2  # a strict prefix diverges where it ends


def test_requests_are_matched_by_prompt_not_position() -> None:
    m = OutputMatcher()
    base = [req(f"k{i}", (i, i + 1, i + 2)) for i in range(50)]
    cand = [req(f"k{i}", (i, i + 1, i + 2) if i != 7 else (i, 99, i + 2)) for i in range(50)]
    random.Random(1).shuffle(cand)
    for r in base:
        m.see("baseline", r, "b.json")
    for r in cand:
        m.see("candidate", r, "c.json")
    assert (m.counts["identical"], m.counts["divergent"]) == (49, 1)
    assert m.by_position == {1: 1}
    ex = m.examples[0]
    assert (ex.prompt_key, ex.position, ex.baseline, ex.candidate, ex.unit) == ("k7", 1, "8", "99", "token")


def test_unmatched_and_missing_are_counted_never_dropped() -> None:
    m = OutputMatcher()
    for r in (req("a", text="x"), req("b", text="y"), req(None, text="z"), req("c"), req("d", ok=False)):
        m.see("baseline", r, "b")
    for r in (req("a", text="x"), req("e", text="q"), req(None, text="w")):
        m.see("candidate", r, "c")
    assert (m.comparable, m.counts["identical"]) == (1, 1)
    assert m.problems["baseline"] == {"no prompt saved": 1, "no output saved": 1, "failed": 1}
    assert m.problems["candidate"] == {"prompt not in the baseline": 1, "no prompt saved": 1}
    assert m.unasked() == 1  # "b": the baseline asked it, no candidate did
    lines, verdict = equality_lines(m, Policy())
    assert lines[0].left_problems["asked by no candidate"] == 1
    assert verdict is not None
    assert "no A/A' floor" in verdict.reason


def test_not_measured_says_why() -> None:
    m = OutputMatcher()
    m.see("baseline", req("a"), "b")
    m.see("candidate", req("a"), "c")
    assert m.not_measured() == "no side saved its outputs"
    assert equality_lines(m, Policy()) == ([], None)
    m2 = OutputMatcher()
    m2.see("baseline", req(None, text="x"), "b")
    m2.see("candidate", req(None, text="x"), "c")
    assert "not the prompts" in (m2.not_measured() or "")


def test_text_divergence_position_is_in_characters() -> None:
    m = OutputMatcher()
    m.see("baseline", req("a", text="hello world"), "b")
    m.see("candidate", req("a", text="hello there"), "c")
    assert (m.counts["divergent"], m.examples[0].position, m.examples[0].unit) == (1, 6, "character")


def test_past_the_memory_budget_mismatches_are_still_counted() -> None:
    m = OutputMatcher(keep_bytes=8)  # room for the first output (2 ids, 8 bytes) only
    m.see("baseline", req("a", (1, 2)), "b")
    m.see("baseline", req("b", (1, 2)), "b")
    m.see("candidate", req("a", (1, 3)), "c")
    m.see("candidate", req("b", (1, 3)), "c")
    m.see("candidate", req("b", (1, 2)), "c")
    assert (m.counts["identical"], m.counts["divergent"]) == (1, 2)
    assert m.by_position == {1: 1}
    assert m.problems["candidate"] == {"divergence position not kept (memory budget)": 1}


def test_token_ids_against_text_are_not_compared() -> None:
    m = OutputMatcher()
    m.see("baseline", req("a", (1, 2)), "b")
    m.see("candidate", req("a", text="x"), "c")
    assert m.comparable == 0
    assert m.problems["candidate"] == {"token ids on one side only": 1}
