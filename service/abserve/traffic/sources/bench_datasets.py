"""The data sets ``vllm bench serve`` reads for custom and ShareGPT-style traffic.

- ``custom`` (``--dataset-name custom``): JSON Lines, ``{"prompt": TEXT, "output_tokens": N}``
  (``output_tokens`` optional);
- ``custom_mm`` (vLLM's ``CustomImageDataset``): ``{"prompt": TEXT, "image_files": [PATH,
  ...]}`` or ``{"content": [{"type": "text", "text": ...}, {"type": "image", "image": PATH},
  {"type": "image_url", "image_url": {"url": PATH_OR_URL}}]}``;
- ``sharegpt``: one JSON array (or JSON Lines) of ``{"conversations": [{"from": "human",
  "value": TEXT}, {"from": "gpt", "value": ...}], "image": PATH_OR_LIST}``; ``<image>``
  markers place the images, else they follow the first turn's text. A conversation of one
  human turn is one request, as in vLLM; one of several (``sessions: true``, the default) is
  a session (``parse_sharegpt_turns``): turn ``k`` is sent with the recorded history (an
  optional ``system`` turn, every earlier human turn and its recorded reply), its id is the
  entry's ``id``, and ``think_s`` (of the entry, or of a human turn) is the recorded pause
  before each later turn. With ``sessions: false`` only the first turn is sent.

Each becomes one streamed, greedy chat/completions request (text then images, as vLLM's
``openai-chat`` backend sends them) of ``output_tokens`` or the source's ``max_tokens``
tokens. Image references stay as written here; ``prepare`` inlines paths and checks URLs.
"""

from __future__ import annotations

import copy
from typing import Any

from abserve.traffic.sources.imported import (
    Imported,
    LineError,
    SessionMark,
    arrival_of,
    tags_of,
    think_of,
)

IMAGE_MARK = "<image>"
USER_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "model"})


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
    """One conversation of a ShareGPT-style data set, its first turn only."""
    obj = _object(value)
    turns = _list(obj.get("conversations"), "conversations")
    if len(turns) < 1 or not isinstance(turns[0], dict) or "value" not in turns[0]:
        raise LineError("'conversations' needs a first turn with a 'value'")
    refs = _refs(obj)
    parts = _turn_parts(_str(turns[0]["value"], "conversations[0].value"), refs)
    return _imported(obj, line, parts + refs, "bench-sharegpt", max_tokens)


def parse_sharegpt_turns(value: Any, line: int, max_tokens: int) -> list[Imported]:
    """Every turn of a conversation: one request, or a session of several (module docstring)."""
    obj = _object(value)
    system, humans = _dialogue(_list(obj.get("conversations"), "conversations"))
    if len(humans) < 2:
        return [parse_sharegpt(value, line, max_tokens)]
    refs = _refs(obj)
    contents = [_turn_parts(_str(h["value"], "conversations[].value"), refs) for h, _ in humans]
    contents[0] += refs  # images no marker placed follow the first turn's text
    history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    key = obj.get("id")
    key = str(key) if isinstance(key, str | int) and not isinstance(key, bool) else ""
    out = []
    for k, ((human, reply), parts) in enumerate(zip(humans, contents, strict=True)):
        think = think_of(human) if "think_s" in human else think_of(obj) if k else 0.0
        mark = SessionMark(key, k + 1, think if k else 0.0)
        out.append(_imported(obj, line, parts, "bench-sharegpt", max_tokens, history, mark))
        history = [*history, {"role": "user", "content": parts}]
        if reply is not None:
            history.append({"role": "assistant", "content": reply})
    return out


def _dialogue(turns: list[Any]) -> tuple[str | None, list[tuple[dict[str, Any], str | None]]]:
    """The system text and the human turns, each with its recorded reply; refuses turns out
    of order (a reply before any question, two questions or two replies in a row)."""
    system: str | None = None
    humans: list[tuple[dict[str, Any], str | None]] = []
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or "value" not in turn:
            raise LineError(f"conversations[{k}] needs 'from' and 'value'")
        role = str(turn.get("from", "")).lower()
        text = _str(turn["value"], f"conversations[{k}].value")
        if role == "system" and k == 0:
            system = text
        elif role in USER_ROLES and (not humans or humans[-1][1] is not None):
            humans.append((turn, None))
        elif role in ASSISTANT_ROLES and humans and humans[-1][1] is None:
            humans[-1] = (humans[-1][0], text)
        else:
            raise LineError(f"conversation turns out of order: conversations[{k}] is from "
                            f"{role[:20]!r} (a human turn and its reply alternate; "
                            "sessions: false sends first turns only)")
    if not humans:
        raise LineError("'conversations' has no human turn")
    return system, humans


def _refs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    image = obj.get("image")
    images = [] if image is None else [image] if isinstance(image, str) else _list(image, "image")
    return [_image(_str(p, "image")) for p in images]


def _turn_parts(prompt: str, refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A human turn's text, an image (taken from ``refs``) at each ``<image>`` mark."""
    pieces = prompt.split(IMAGE_MARK)
    parts: list[dict[str, Any]] = []
    for k, piece in enumerate(pieces):
        if piece.strip():
            parts.append(_text(piece))
        if k < len(pieces) - 1 and refs:
            parts.append(refs.pop(0))
    return parts


def _imported(obj: dict[str, Any], line: int, parts: list[dict[str, Any]], fmt: str,
              max_tokens: int, history: list[dict[str, Any]] | None = None,
              session: SessionMark | None = None) -> Imported:
    if not parts:
        raise LineError("the request has no text and no image")
    tokens = obj.get("output_tokens", max_tokens)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise LineError("'output_tokens' must be a positive integer")
    # a copy per turn: ``prepare`` inlines images into its own body in place
    messages = copy.deepcopy([*(history or []), {"role": "user", "content": parts}])
    body = {"messages": messages, "max_tokens": tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    n_refs = sum(1 for m in messages if isinstance(m["content"], list)
                 for p in m["content"] if p["type"] == "image_url")
    return Imported(line, "chat/completions", body, arrival_of(obj), tags_of(obj), fmt, n_refs,
                    session=session)


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
