"""The data sets ``vllm bench serve`` reads for custom and ShareGPT-style traffic.

- ``custom`` (``--dataset-name custom``): JSON Lines, ``{"prompt": TEXT, "output_tokens": N}``
  (``output_tokens`` optional);
- ``custom_mm`` (vLLM's ``CustomImageDataset``): ``{"prompt": TEXT, "image_files": [PATH,
  ...]}`` or ``{"content": [{"type": "text", "text": ...}, {"type": "image", "image": PATH},
  {"type": "image_url", "image_url": {"url": PATH_OR_URL}}]}``;
- ``sharegpt``: one JSON array (or JSON Lines) of ``{"conversations": [{"from": "human",
  "value": TEXT}, {"from": "gpt", "value": ...}], "image": PATH_OR_LIST}``; the first turn is
  the prompt, as in vLLM; ``<image>`` markers in it place the images, else they follow it.

Each becomes one streamed, greedy chat/completions request (text then images, as vLLM's
``openai-chat`` backend sends them) of ``output_tokens`` or the source's ``max_tokens``
tokens. Image references stay as written here; ``prepare`` inlines paths and checks URLs.
"""

from __future__ import annotations

from typing import Any

from abserve.traffic.sources.imported import Imported, LineError, arrival_of, tags_of

IMAGE_MARK = "<image>"


def looks_like_sharegpt(value: dict[str, Any]) -> bool:
    return "conversations" in value


def looks_like_custom(value: dict[str, Any]) -> bool:
    return "prompt" in value or "content" in value or "image_files" in value


def parse_custom(value: Any, line: int, max_tokens: int) -> Imported:
    """One line of a ``custom`` or ``custom_mm`` data set."""
    obj = _object(value)
    if "content" in obj:
        parts = [_part(p) for p in _list(obj["content"], "content")]
    elif "prompt" in obj:
        parts = [_text(_str(obj["prompt"], "prompt"))]
        if "image_files" in obj:
            parts += [_image(_str(p, "image_files[]")) for p in _list(obj["image_files"], "image_files")]
    else:
        raise LineError("a custom data set line needs 'prompt' (and 'image_files') or 'content'")
    return _imported(obj, line, parts, "bench-custom", max_tokens)


def parse_sharegpt(value: Any, line: int, max_tokens: int) -> Imported:
    """One conversation of a ShareGPT-style data set."""
    obj = _object(value)
    turns = _list(obj.get("conversations"), "conversations")
    if len(turns) < 1 or not isinstance(turns[0], dict) or "value" not in turns[0]:
        raise LineError("'conversations' needs a first turn with a 'value'")
    prompt = _str(turns[0]["value"], "conversations[0].value")
    image = obj.get("image")
    images = [] if image is None else [image] if isinstance(image, str) else _list(image, "image")
    refs = [_image(_str(p, "image")) for p in images]
    pieces = prompt.split(IMAGE_MARK)
    parts: list[dict[str, Any]] = []
    for k, piece in enumerate(pieces):
        if piece.strip():
            parts.append(_text(piece))
        if k < len(pieces) - 1 and refs:
            parts.append(refs.pop(0))
    return _imported(obj, line, parts + refs, "bench-sharegpt", max_tokens)


def _imported(obj: dict[str, Any], line: int, parts: list[dict[str, Any]], fmt: str,
              max_tokens: int) -> Imported:
    if not parts:
        raise LineError("the request has no text and no image")
    tokens = obj.get("output_tokens", max_tokens)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise LineError("'output_tokens' must be a positive integer")
    body = {"messages": [{"role": "user", "content": parts}], "max_tokens": tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    n_refs = sum(1 for p in parts if p["type"] == "image_url")
    return Imported(line, "chat/completions", body, arrival_of(obj), tags_of(obj), fmt, n_refs)


def _part(part: Any) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise LineError("every 'content' item must be a mapping")
    kind = part.get("type")
    if kind == "text":
        return _text(_str(part.get("text"), "content[].text"))
    if kind == "image":
        return _image(_str(part.get("image"), "content[].image"))
    if kind == "image_url":
        ref = part.get("image_url")
        if isinstance(ref, dict):
            extra = {k: v for k, v in ref.items() if k != "url"}
            return {"type": "image_url", "image_url": {"url": _str(ref.get("url"), "image_url.url"),
                                                       **extra}}
        return _image(_str(ref, "content[].image_url"))
    raise LineError(f"unknown content part type {str(kind)[:40]!r} (text, image or image_url)")


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image(ref: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": ref}}


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LineError("expected a JSON object")
    return value


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise LineError(f"'{name}' must be a non-empty list")
    return value


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise LineError(f"'{name}' must be a string")
    return value
