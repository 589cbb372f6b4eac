"""The fake upstream plus a ``/tokenize`` that keeps vLLM's contract, for load tests.

vLLM's ``POST /tokenize`` takes chat ``messages`` (``add_generation_prompt`` defaults to true)
and answers ``{"count", "max_model_len", "tokens"}`` with each image expanded to its
placeholder tokens. This one does the same with a LLaVA-like template
(``<s> USER : <content> ASSISTANT :``), words as tokens (words longer than six letters cost
two tokens, so calibration cannot assume one token per word) and ``tokens_per_image``
copies of ``IMAGE_TOKEN`` per image. ``tokenize_prompt`` is the same function for tests that
check where spans landed in the requests that arrived.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tests.support.fake_upstream import FakeUpstream, Knobs

IMAGE_TOKEN = 32000
MAX_MODEL_LEN = 8192


def _word_tokens(word: str) -> list[int]:
    base = 100 + int.from_bytes(hashlib.sha256(word.encode()).digest()[:2], "big") % 30000
    return [base, base + 1] if len(word) > 6 else [base]


def tokenize_prompt(
    messages: list[dict[str, Any]], tokens_per_image: int = 4, add_generation_prompt: bool = True
) -> list[int]:
    """The fake server's tokenization of chat messages."""
    tokens = [1]
    for message in messages:
        tokens += [2, 3]  # role, ":"
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for part in parts:
            if part["type"] == "text":
                for word in part["text"].split():
                    tokens += _word_tokens(word)
            elif part["type"] == "image_url":
                tokens += [IMAGE_TOKEN] * tokens_per_image
    if add_generation_prompt:
        tokens += [4, 3]
    return tokens


class TokenizingUpstream(FakeUpstream):
    """``FakeUpstream`` that also answers ``POST /tokenize`` like vLLM."""

    def __init__(self, knobs: Knobs | None = None, tokens_per_image: int = 4) -> None:
        super().__init__(knobs)
        self.tokens_per_image = tokens_per_image
        self.tokenize_calls = 0
        # (headers, parsed body) of each completion request, paired as they arrived
        self.arrivals: list[tuple[dict[str, str], dict[str, Any]]] = []

    def app(self) -> Starlette:
        app = super().app()
        app.router.routes.append(Route("/tokenize", self._tokenize, methods=["POST"]))
        return app

    async def _complete(self, request: Request) -> Response:
        self.arrivals.append((dict(request.headers), orjson.loads(await request.body())))
        return await super()._complete(request)

    async def _tokenize(self, request: Request) -> Response:
        self.tokenize_calls += 1
        body = orjson.loads(await request.body())
        if "messages" not in body:
            return JSONResponse({"error": {"message": "need messages", "code": 400}}, 400)
        tokens = tokenize_prompt(
            body["messages"], self.tokens_per_image, body.get("add_generation_prompt", True)
        )
        return JSONResponse(
            {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens, "token_strs": None}
        )
