"""The prompt-logprob sample's pure parts: the decision, the probe request, the parser."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abserve.router.prompt_sample import parse, probe_body, sampled


def _fp(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


@given(st.integers(), st.floats(min_value=0.0, max_value=1.0))
def test_the_decision_is_a_function_of_the_fingerprint(i: int, fraction: float) -> None:
    assert sampled(_fp(i), fraction) == sampled(_fp(i), fraction)


def test_the_sampled_share_matches_the_fraction_and_the_edges_are_exact() -> None:
    fps = [_fp(i) for i in range(4000)]
    share = sum(sampled(fp, 0.25) for fp in fps) / len(fps)
    assert 0.22 < share < 0.28
    assert not any(sampled(fp, 0.0) for fp in fps)
    assert all(sampled(fp, 1.0) for fp in fps)
    assert all(sampled(fp, 0.5) for fp in fps if sampled(fp, 0.25))  # nested samples


def test_probe_is_the_client_request_non_streamed_for_one_token() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 3,
            "max_completion_tokens": 64, "min_tokens": 8, "temperature": 0.0, "n": 2}
    probe = probe_body(body, "chat/completions", 4)
    assert probe == {"model": "m", "messages": body["messages"], "temperature": 0.0,
                     "max_tokens": 1, "prompt_logprobs": 4, "return_token_ids": True,
                     "logprobs": False}
    assert body["stream"] is True  # the client's request is not touched
    comp = probe_body({"model": "m", "prompt": "p", "logprobs": 2, "echo": True}, "completions", 0)
    assert comp == {"model": "m", "prompt": "p", "max_tokens": 1, "prompt_logprobs": 0,
                    "return_token_ids": True}


def _entry(own: int, own_rank: int, others: dict[int, float]) -> dict[str, dict[str, object]]:
    out = {str(t): {"logprob": lp, "rank": r + 1, "decoded_token": f"t{t}"}
           for r, (t, lp) in enumerate(others.items())}
    out[str(own)] = {"logprob": -3.0, "rank": own_rank, "decoded_token": f"t{own}"}
    return out


def test_chat_layout_top_k_by_rank_and_the_prompt_token_kept_apart() -> None:
    resp = {"prompt_token_ids": [1, 9, 8],
            "prompt_logprobs": [None, _entry(9, 7, {4: -0.1, 5: -0.2}), _entry(8, 1, {8: -3.0})]}
    out = parse(resp, "chat/completions", 2)
    assert out is not None
    assert [p.token_id for p in out] == [9, 8]
    assert out[0].logprob == -3.0
    assert [t.token_id for t in out[0].top] == [4, 5]
    assert [t.token_id for t in out[1].top] == [8]


def test_completions_layout_and_k0_keeps_only_the_prompt_token() -> None:
    resp = {"choices": [{"prompt_token_ids": [1, 9], "prompt_logprobs": [None, _entry(9, 3, {})]}]}
    out = parse(resp, "completions", 0)
    assert out is not None
    assert out[0].token_id == 9
    assert out[0].top == []


@pytest.mark.parametrize("resp", [{}, {"prompt_logprobs": [None], "prompt_token_ids": [1, 2]},
                                  {"prompt_logprobs": None, "prompt_token_ids": [1]}])
def test_answers_without_usable_prompt_logprobs_give_none(resp: dict[str, object]) -> None:
    assert parse(resp, "chat/completions", 1) is None
