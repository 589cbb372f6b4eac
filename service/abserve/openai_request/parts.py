"""Chat content parts as vLLM 0.32 reads them: text, or media with every URL it would load.

The router must check every media URL an arm would fetch, so it classifies a part the way
vLLM's own parser does (``vllm/renderers/chat_utils.py``,
``_parse_chat_message_content_mm_part`` and ``_parse_chat_message_content_part``):

- a part with a string ``type`` and no ``uuid`` (``uuid`` absent or null) is read by its
  type: ``image_url`` (URL at ``image_url.url``), ``input_image`` (URL at ``image_url``, a
  string: the Responses shape, not ``input_image``), ``audio_url``, ``video_url``,
  ``input_audio`` (base64 data, turned into a ``data:`` URL), or one of the text types;
- a part WITHOUT a type, or with ANY non-null ``uuid``, is media whatever its ``type``
  says: vLLM takes the first of ``image_url``, ``image_pil``, ``image_embeds``,
  ``audio_embeds``, ``video_embeds``, ``prompt_embeds``, ``audio_url``, ``input_audio``,
  ``video_url``, ``tool_reference`` that the part has (the URL may be a string or
  ``{"url": ...}``; with a uuid it may be null: an item cached by uuid);
- a non-string ``type`` without a uuid is an error.

``classify`` returns the part's modality (the one vLLM counts it as) and, beyond what vLLM
reads, EVERY URL found under any URL-bearing key of the part (``image_url``,
``audio_url``, ``video_url``), so a URL is checked even where this vLLM version would not
load it. Parts the router does not serve (embeddings, PIL images, prompt embeds, tool
references, unknown types) are refused with 400, as are malformed URL values.
``tests/unit/router/test_router_parts_vllm.py`` feeds the parts the router accepts to vLLM's own
parser and checks that every URL vLLM would load was among those checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from abserve.openai_request.errors import RouterError

Modality = Literal["text", "image", "audio", "video"]

TEXT_TYPES = frozenset({"text", "input_text", "output_text", "refusal", "thinking"})
URL_KEYS = ("image_url", "audio_url", "video_url")  # every key under which a URL may sit
TYPED_MEDIA: dict[str, Modality] = {"image_url": "image", "input_image": "image",
                                    "audio_url": "audio", "video_url": "video",
                                    "input_audio": "audio"}
TYPED_URL_KEY = {"image_url": "image_url", "input_image": "image_url", "audio_url": "audio_url",
                 "video_url": "video_url"}  # where vLLM reads a typed part's URL
# vLLM's key order for a part without a type or with a uuid; None: refused by the router.
UNTYPED_KEYS: tuple[tuple[str, Modality | None], ...] = (
    ("image_url", "image"), ("image_pil", None), ("image_embeds", None),
    ("audio_embeds", None), ("video_embeds", None), ("prompt_embeds", None),
    ("audio_url", "audio"), ("input_audio", "audio"), ("video_url", "video"),
    ("tool_reference", None))


@dataclass(frozen=True)
class Part:
    """One content part as vLLM reads it."""

    modality: Modality
    urls: tuple[tuple[str, str], ...] = ()  # (key, URL) for every URL the part carries
    uuid: str | None = None


def _refuse(message: str, param: str = "type") -> RouterError:
    return RouterError(400, message, param=param)


def _url_of(key: str, value: Any) -> str | None:
    """The URL under ``key``: a string, ``{"url": string}``, or null (no URL)."""
    if isinstance(value, dict):
        value = value.get("url")
    if value is None or isinstance(value, str):
        return value
    raise _refuse(f"{key} must be a URL string or an object with a url string", key)


def _urls(part: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    found = []
    for key in URL_KEYS:
        if key in part:
            url = _url_of(key, part[key])
            if url is not None:
                found.append((key, url))
    return tuple(found)


def _typed(part: dict[str, Any], kind: str) -> Modality:
    """The modality of a part read by its (string) type, as vLLM does without a uuid."""
    if kind in TEXT_TYPES:
        return "text"
    modality = TYPED_MEDIA.get(kind)
    if modality is None:
        raise _refuse("unsupported content part type")
    if kind == "input_audio":
        if not isinstance(part.get("input_audio"), dict):
            raise _refuse("input_audio part needs an input_audio object", "input_audio")
    elif all(key != TYPED_URL_KEY[kind] for key, _ in _urls(part)):
        raise _refuse(f"{kind} part needs a url", kind)
    return modality


def _untyped(part: dict[str, Any]) -> Modality:
    """The modality vLLM gives a part without a type or with a uuid (first key wins)."""
    for key, modality in UNTYPED_KEYS:
        if key in part:
            if modality is None:
                raise _refuse("unsupported content part", key)
            if key == "input_audio" and not isinstance(part[key], dict | None):
                raise _refuse("input_audio must be an object", key)
            return modality
    raise _refuse("content part has no type and no media field")


def classify(part: Any) -> Part:
    """The part as vLLM 0.32 reads it, with every URL it carries; 400 if refused."""
    if not isinstance(part, dict):
        raise _refuse("content part must be an object")
    kind, uuid = part.get("type"), part.get("uuid")
    urls = _urls(part)
    if isinstance(kind, str) and uuid is None:
        return Part(_typed(part, kind), urls)
    if kind is not None and uuid is None:
        raise _refuse("content part type must be a string")
    return Part(_untyped(part), urls, None if uuid is None else str(uuid))
