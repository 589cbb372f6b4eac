"""Turning a client's HTTP request into a checked request, before any arm is called.

Order matters and each step fails fast with an OpenAI-style error:
1. the body is read with a byte cap (413 as soon as the cap is passed, whether or not a
   Content-Length was sent; a too-large Content-Length is refused before reading);
2. parsed once with orjson (400 on malformed JSON);
3. checked against a minimal schema of the endpoint (400 listing the bad fields);
4. its media parts are counted (400 over ``max_images``), their types and URLs checked
   (``security.check_media_url``).
``identify`` (called when recording, off the latency path) gives the fingerprint: the
sha256 of canonical JSON (sorted keys) of the client's request with every media URL
replaced by ``sha256:<hex>`` of the URL. Image bytes are never kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from abserve.router.errors import RouterError
from abserve.router.security import check_media_url

Endpoint = Literal["chat/completions", "completions"]

TEXT_PARTS = {"text", "input_text", "refusal", "thinking"}
URL_PARTS = {"image_url": "image", "input_image": "image", "video_url": "video",
             "audio_url": "audio"}
DATA_PARTS = {"input_audio"}


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Message(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Open):
    model: str
    messages: list[_Message] = Field(min_length=1)
    stream: bool | None = False


class CompletionRequest(_Open):
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    stream: bool | None = False


@dataclass
class CheckedRequest:
    """A request that passed every check, as the client sent it (parsed once)."""

    endpoint: Endpoint
    body: dict[str, Any]
    stream: bool


@dataclass
class Identity:
    """What the record keeps of a request: fingerprint, image hashes, text if allowed."""

    fingerprint: str
    image_hashes: list[str] = field(default_factory=list)
    prompt_text: str | None = None


async def read_capped(chunks: AsyncIterator[bytes], content_length: str | None,
                      limit: int) -> bytes:
    """Read a body of at most ``limit`` bytes; 413 the moment it is known to be larger."""
    if content_length is not None:
        if not content_length.isdigit():
            raise RouterError(400, "invalid Content-Length")
        if int(content_length) > limit:
            raise RouterError(413, f"request body exceeds {limit} bytes")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise RouterError(413, f"request body exceeds {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def parse_json(raw: bytes) -> dict[str, Any]:
    """Parse the body once; 400 unless it is a JSON object."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RouterError(400, "request body is not valid JSON") from exc
    if not isinstance(body, dict):
        raise RouterError(400, "request body must be a JSON object")
    return body


def check_schema(endpoint: Endpoint, body: dict[str, Any]) -> None:
    """400 naming the invalid fields (locations only, never their values)."""
    model = ChatRequest if endpoint == "chat/completions" else CompletionRequest
    try:
        model.model_validate(body)
    except ValidationError as exc:
        where = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        raise RouterError(400, "invalid request: " + ", ".join(where[:5]),
                          param=where[0] if where else None) from exc


def _part_url(part: dict[str, Any], kind: str) -> str:
    value = part.get(kind)
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise RouterError(400, f"{kind} part needs a url string", param=kind)
    return url


def _sha(url: str) -> str:
    return "sha256:" + hashlib.sha256(url.encode()).hexdigest()


async def _check_parts(body: dict[str, Any], max_images: int, allowed_hosts: list[str]) -> None:
    """Check every content part's type and media URL, and count the images."""
    images = 0
    for message in body["messages"]:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type")
            if kind in TEXT_PARTS or kind in DATA_PARTS:
                continue
            if kind not in URL_PARTS:
                raise RouterError(400, "unsupported content part type", param="type")
            await check_media_url(_part_url(part, kind), allowed_hosts)
            if URL_PARTS[kind] == "image":
                images += 1
                if images > max_images:
                    raise RouterError(400, f"more than {max_images} images", param=kind)


async def check_request(endpoint: Endpoint, raw: bytes, *, max_images: int,
                        allowed_hosts: list[str]) -> CheckedRequest:
    """Parse and check one request body (see the module docstring for the order)."""
    body = parse_json(raw)
    check_schema(endpoint, body)
    if endpoint == "chat/completions":
        await _check_parts(body, max_images, allowed_hosts)
    return CheckedRequest(endpoint=endpoint, body=body, stream=bool(body.get("stream")))


def identify(checked: CheckedRequest, keep_text: bool) -> Identity:
    """Fingerprint a checked request (off the latency path: hashing 1 MB costs ~1 ms)."""
    body = checked.body
    hashes: list[str] = []
    texts: list[str] = []
    canonical: dict[str, Any] = body
    if checked.endpoint == "chat/completions":
        messages = []
        for message in body["messages"]:
            content = message.get("content")
            if not isinstance(content, list):
                texts.append(content or "")
                messages.append(message)
                continue
            parts = []
            for part in content:
                kind = part.get("type")
                if kind in URL_PARTS:
                    digest = _sha(_part_url(part, kind))
                    hashes += [digest] if URL_PARTS[kind] == "image" else []
                    part = {**part, kind: {"url": digest}}
                elif kind in TEXT_PARTS:
                    texts.append(str(part.get("text", "")))
                parts.append(part)
            messages.append({**message, "content": parts})
        canonical = {**body, "messages": messages}
    else:
        prompt = body["prompt"]
        texts = [prompt] if isinstance(prompt, str) else [str(p) for p in prompt]
    fingerprint = hashlib.sha256(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return Identity(fingerprint, hashes, "\n".join(texts) if keep_text else None)
