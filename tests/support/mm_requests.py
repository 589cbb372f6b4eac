"""Small helpers that build multi-image chat requests for tests against real servers."""

from __future__ import annotations

import random
from typing import Any

from abserve.traffic.images import make_image

WORDS = (
    "the river carried small boats past old stone bridges while children counted clouds and "
    "merchants argued about the price of salt near the harbour gate at dawn"
).split()


def png_data_url(seed: int, size: int = 28) -> str:
    """A deterministic noisy PNG as a data URL (the traffic generator's image maker)."""
    return make_image(seed, size, size, "png").data_url


def long_text(words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def chat_request(model: str, images: int, words: int, seed: int = 0, max_tokens: int = 16) -> dict[str, Any]:
    """A chat request: text, then ``images`` distinct images, then a question."""
    content: list[dict[str, Any]] = [{"type": "text", "text": long_text(words, seed)}]
    content += [
        {"type": "image_url", "image_url": {"url": png_data_url(seed * 100_003 + i)}} for i in range(images)
    ]
    content.append({"type": "text", "text": "describe the pictures"})
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "logprobs": True,
        "top_logprobs": 5,
        "return_token_ids": True,
    }
