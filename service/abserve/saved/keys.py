"""What identifies a saved request across tools, and the one TPOT every reader computes.

``prompt_key`` is the SHA-256 of a prompt's text and its image hashes, so a request saved by
one tool is matched with the same request saved by another (or by an abserve arm) by what was
asked, never by position. The text is what abserve's router keeps as ``prompt_text``
(``abserve.openai_request.validation.identify``): every text part of every message, in order, joined
by newlines (a completions prompt as it is); the image hashes are the router's
``url_hash.record_hash`` of each image URL (XXH3-128), so keys agree with an abserve arm that
stored its prompt text. A tool that saved the request body (AIPerf's ``inputs.json``,
GuideLLM's ``request_args``) gives both; a tool that saved only the text gives the text.

``tpot`` is ``(e2e - ttft) / (output_tokens - 1)``: vLLM's benchmark, AIPerf (its
``inter_token_latency``), GuideLLM (its ``inter_token_latency_ms``) and abserve's judgment
(``abserve.compare.latency``) all mean this by time per output token, so every reader derives
it the same way from the request's own times instead of copying each tool's column.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from abserve.base.url_hash import record_hash
from abserve.openai_request.errors import RouterError
from abserve.openai_request.parts import classify


def prompt_key(text: str, image_hashes: Sequence[str] = ()) -> str:
    """SHA-256 (hex) of the prompt text and, in order, its image hashes."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    for image in image_hashes:
        digest.update(b"\0" + image.encode())
    return digest.hexdigest()


def _content_identity(content: Any, texts: list[str], images: list[str]) -> None:
    if not isinstance(content, list):
        texts.append(content if isinstance(content, str) else "")
        return
    for part in content:
        try:
            read = classify(part)
        except RouterError:
            continue  # a part vLLM would refuse carries neither text nor an image
        if read.modality == "text":
            texts.append(str(part.get("text", "")))
        elif read.modality == "image":
            images.append(record_hash(read.urls[0][1]) if read.urls else record_hash(f"uuid:{read.uuid}"))


def body_identity(body: Any) -> tuple[str, list[str]] | None:
    """The prompt text and image hashes of an OpenAI chat or completions request body, as the
    router records them; None when the body holds neither ``messages`` nor ``prompt``."""
    if not isinstance(body, dict):
        return None
    texts: list[str] = []
    images: list[str] = []
    if isinstance(body.get("messages"), list):
        for message in body["messages"]:
            if isinstance(message, dict):
                _content_identity(message.get("content"), texts, images)
        return "\n".join(texts), images
    prompt = body.get("prompt")
    if prompt is None:
        return None
    return "\n".join(_strings(prompt)), images


def _strings(prompt: Any) -> Iterable[str]:
    return [prompt] if isinstance(prompt, str) else [str(p) for p in prompt]


def body_key(body: Any) -> str | None:
    """``prompt_key`` of a request body; None when it has no prompt."""
    identity = body_identity(body)
    return None if identity is None else prompt_key(*identity)


def tpot(e2e: float | None, ttft: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first; None without the three or with fewer than 2 tokens."""
    if e2e is None or ttft is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e - ttft) / (output_tokens - 1)
