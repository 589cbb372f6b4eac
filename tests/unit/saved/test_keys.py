"""prompt_key agrees with what abserve's router records; tpot is one formula for every tool."""

from __future__ import annotations

import pytest

from abserve.openai_request.validation import CheckedRequest, identify
from abserve.saved.keys import body_identity, body_key, prompt_key, tpot

IMAGE = "data:image/png;base64,iVBORw0KGgo="
CHAT = {"model": "m", "messages": [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE}},
                                 {"type": "text", "text": "what is it?"}]}]}


def test_chat_body_gives_the_routers_prompt_text_and_image_hashes() -> None:
    ident = identify(CheckedRequest("chat/completions", CHAT, stream=True), keep_text=True)
    text, images = body_identity(CHAT) or ("", [])
    assert (text, images) == (ident.prompt_text, ident.image_hashes)
    assert body_key(CHAT) == prompt_key(ident.prompt_text or "", ident.image_hashes)


def test_completions_prompt_and_no_prompt() -> None:
    assert body_identity({"prompt": "hello"}) == ("hello", [])
    assert body_identity({"prompt": ["a", "b"]}) == ("a\nb", [])
    assert body_identity({"input": "x"}) is None
    assert body_key("not a body") is None


def test_images_change_the_key_and_their_order_matters() -> None:
    assert prompt_key("p") != prompt_key("p", ["x"])
    assert prompt_key("p", ["x", "y"]) != prompt_key("p", ["y", "x"])
    assert prompt_key("p", ["x"]) == prompt_key("p", ["x"])


def test_a_part_vllm_refuses_counts_as_neither_text_nor_image() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "bogus"}, {"type": "text", "text": "t"}]}]}
    assert body_identity(body) == ("t", [])


@pytest.mark.parametrize(("e2e", "ttft", "n", "want"), [
    (1.0, 0.1, 10, 0.1), (1.0, 0.1, 1, None), (None, 0.1, 5, None), (1.0, None, 5, None),
    (1.0, 0.1, None, None)])
def test_tpot(e2e: float | None, ttft: float | None, n: int | None, want: float | None) -> None:
    got = tpot(e2e, ttft, n)
    assert got == pytest.approx(want) if want is not None else got is None
