"""Graded equality on synthetic outputs with known answers (swaps, near-ties, drift, errors)."""

from __future__ import annotations

import pytest
from tests.support.records_factory import arm, position

from abserve.compare.equality import compare_pair, margin_of

TOKENS = [10, 20, 30, 40, 50, 60]


def test_same_tokens_and_bitwise_logprobs_are_identical() -> None:
    r = compare_pair("r", "a", "b", arm("a", TOKENS), arm("b", TOKENS))
    assert r.cls == "identical"
    assert r.position is None
    assert r.max_logprob_delta == 0.0


def test_injected_swap_at_known_position_is_divergent_with_both_tokens() -> None:
    swapped = [*TOKENS[:3], 99, 98, 97]
    r = compare_pair("r", "a", "b", arm("a", TOKENS), arm("b", swapped))
    assert r.cls == "divergent"
    assert r.position == 3
    assert r.left_side is not None
    assert r.right_side is not None
    assert (r.left_side.token_id, r.right_side.token_id) == (40, 99)
    assert r.left_side.other_in_top is False
    assert [c.token_id for c in r.left_side.top][:2] == [40, 41]
    assert r.left_side.margin == pytest.approx(1.0)


def test_near_tie_where_each_token_is_in_the_others_top_k_is_close() -> None:
    left_lps = [position(t) for t in TOKENS]
    right_tokens = [*TOKENS[:2], 31, 41, 51, 61]
    right_lps = [position(t) for t in right_tokens]
    left_lps[2] = position(30, alternatives=[31], logprob=-0.69)
    right_lps[2] = position(31, alternatives=[30], logprob=-0.70)
    r = compare_pair(
        "r", "a", "b", arm("a", TOKENS, logprobs=left_lps), arm("b", right_tokens, logprobs=right_lps)
    )
    assert r.cls == "close"
    assert r.position == 2
    assert r.left_side is not None
    assert r.left_side.other_in_top
    assert r.right_side is not None
    assert r.right_side.other_in_top


def test_only_one_side_in_the_others_top_k_is_divergent() -> None:
    left_lps = [position(t) for t in TOKENS]
    left_lps[1] = position(20, alternatives=[77])  # right's token 77 is in left's top-k
    right = [10, 77, 30, 40, 50, 60]  # but left's 20 is not in right's top-k (78..81)
    r = compare_pair("r", "a", "b", arm("a", TOKENS, logprobs=left_lps), arm("b", right))
    assert r.cls == "divergent"
    assert r.left_side is not None
    assert r.left_side.other_in_top is True
    assert r.right_side is not None
    assert r.right_side.other_in_top is False


def test_same_tokens_with_moved_logprob_is_drift_at_that_position() -> None:
    right_lps = [position(t) for t in TOKENS]
    right_lps[4] = position(50, logprob=-0.106)
    r = compare_pair("r", "a", "b", arm("a", TOKENS), arm("b", TOKENS, logprobs=right_lps))
    assert r.cls == "drift"
    assert r.drift_position == 4
    assert r.max_logprob_delta == pytest.approx(0.006)


def test_drift_within_tolerance_is_identical() -> None:
    right_lps = [position(t, logprob=-0.1 + 1e-7) for t in TOKENS]
    r = compare_pair(
        "r", "a", "b", arm("a", TOKENS), arm("b", TOKENS, logprobs=right_lps), drift_tolerance=1e-6
    )
    assert r.cls == "identical"
    assert 0 < r.max_logprob_delta < 1e-6


def test_different_top_k_sets_are_drift_even_with_equal_chosen_logprob() -> None:
    right_lps = [position(t) for t in TOKENS]
    right_lps[0] = position(10, alternatives=[500, 501, 502, 503])
    r = compare_pair("r", "a", "b", arm("a", TOKENS), arm("b", TOKENS, logprobs=right_lps))
    assert (r.cls, r.drift_position) == ("drift", 0)


def test_prefix_output_is_divergent_at_the_shorter_length_and_flags_finish() -> None:
    r = compare_pair("r", "a", "b", arm("a", TOKENS), arm("b", TOKENS[:4], finish_reason="stop"))
    assert r.cls == "divergent"
    assert r.position == 4
    assert r.right_side is not None
    assert r.right_side.token is None
    assert r.finish_mismatch
    assert r.usage_mismatch


@pytest.mark.parametrize(
    ("right", "problem"),
    [
        (arm("b", TOKENS, truncated=True), "truncated"),
        (arm("b", [], status=None, error_class="timeout_first_token"), "timeout_first_token"),
        (arm("b", [], status=503), "status_503"),
        (None, "missing"),
    ],
)
def test_errors_or_truncation_on_one_side_are_incomparable(right: object, problem: str) -> None:
    r = compare_pair("r", "a", "b", arm("a", TOKENS), right)  # type: ignore[arg-type]
    assert r.cls == "incomparable"
    assert r.left_problem is None
    assert r.right_problem == problem


def test_status_mismatch_is_flagged() -> None:
    r = compare_pair("r", "a", "b", arm("a", TOKENS), arm("b", TOKENS, status=201))
    assert r.cls == "identical"
    assert r.status_mismatch


def test_margin_is_best_minus_second_best_regardless_of_order() -> None:
    p = position(1, alternatives=[2, 3], logprob=-0.5)
    p.top.reverse()
    assert margin_of(p) == pytest.approx(1.0)
