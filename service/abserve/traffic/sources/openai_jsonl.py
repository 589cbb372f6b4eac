"""OpenAI request JSON Lines, as a gateway logs them: one request body per line.

A line is either the bare body (``{"model": ..., "messages": [...]}`` for chat/completions,
``{"model": ..., "prompt": ...}`` for completions) with abserve's optional keys ``timestamp``
/ ``offset`` and ``tags`` beside the body's own (they are removed before sending), or a
wrapper with the body under ``body`` and the endpoint under ``url`` (the OpenAI batch
format: ``{"custom_id", "method", "url", "body"}``) and the same optional keys. A line with
``session_id`` (and optional ``turn``, ``think_s``) is a turn of a session: its body is sent
as recorded (a gateway logs each turn with its whole history).
"""

from __future__ import annotations

from typing import Any

from abserve.traffic.sources.imported import (
    SESSION_KEYS,
    Endpoint,
    Imported,
    LineError,
    arrival_of,
    session_of,
    tags_of,
)

META_KEYS = frozenset({"timestamp", "offset", "offset_s", "tags", *SESSION_KEYS})
WRAPPER_KEYS = frozenset({"body", "url", "method", "custom_id", "endpoint", *META_KEYS})


def looks_like(value: dict[str, Any]) -> bool:
    """Whether an item is an OpenAI request (auto-detection: a body with its model)."""
    body = value.get("body") if isinstance(value.get("body"), dict) else value
    return isinstance(body, dict) and "model" in body and ("messages" in body or "prompt" in body)


def parse(value: Any, line: int) -> Imported:
    """One line of OpenAI request JSONL."""
    if not isinstance(value, dict):
        raise LineError("expected a JSON object (a request body)")
    if isinstance(value.get("body"), dict):
        unknown = sorted(set(value) - WRAPPER_KEYS)
        if unknown:
            raise LineError(f"unknown wrapper fields {unknown}")
        body = dict(value["body"])
        endpoint = _endpoint(value.get("url") or value.get("endpoint"), body)
    else:
        body = {k: v for k, v in value.items() if k not in META_KEYS}
        endpoint = _endpoint(None, body)
    return Imported(line, endpoint, body, arrival_of(value), tags_of(value), "openai",
                    session=session_of(value))


def _endpoint(url: Any, body: dict[str, Any]) -> Endpoint:
    if url is not None:
        if not isinstance(url, str):
            raise LineError("'url' must be the endpoint's path")
        path = url.split("?", 1)[0].rstrip("/")
        if path.endswith("chat/completions"):
            return "chat/completions"
        if path.endswith("/completions") or path == "completions":
            return "completions"
        raise LineError("unsupported endpoint (chat/completions or completions only)")
    if "messages" in body:
        return "chat/completions"
    if "prompt" in body:
        return "completions"
    raise LineError("neither 'messages' (chat/completions) nor 'prompt' (completions)")
