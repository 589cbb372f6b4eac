"""Turning a client's HTTP request into a checked request, before any arm is called.

Order matters and each step fails fast with an OpenAI-style error:
1. the body is read with a byte cap (413 as soon as the cap is passed, whether or not a
   Content-Length was sent; a too-large Content-Length is refused before reading);
2. parsed once with orjson (400 on malformed JSON), its large data URLs cut out first
   (``body_json``: the parser need not read ~1 MB of base64 byte by byte);
3. checked against a minimal schema of the endpoint (400 listing the bad fields);
   The schema is strict where the router itself reads a field (``stream``,
   ``stream_options``, ``logprobs``, ``return_token_ids``, ``echo``: JSON booleans or
   integers, not strings, so ``"stream": "false"`` is a 400, not a stream) and nesting
   deeper than ``MAX_DEPTH`` levels is refused (orjson re-encodes at most 254 levels: a
   deeper body could be forwarded but never recorded);
4. its content parts are read the way vLLM reads them (``parts.classify``): every URL a
   part carries is checked (``security.check_media_url``) and every part vLLM counts as an
   image counts toward ``max_images`` (400 over it).
``identify`` (called when recording, off the latency path) gives the fingerprint: the
BLAKE3 hash of canonical JSON (sorted keys) of the client's request with every media URL
replaced by its ``url_hash.record_hash`` (XXH3-128: the ~1 MB of data URLs a multimodal
request carries in ~0.06 ms, against ~0.36 ms for BLAKE3). Image bytes are never kept;
each URL is hashed once, and the fingerprint hashes only the small canonical JSON.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import blake3
import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from abserve.base.url_hash import record_hash
from abserve.openai_request import body_json
from abserve.openai_request.errors import RouterError
from abserve.openai_request.media_urls import check_media_url
from abserve.openai_request.parts import classify

Endpoint = Literal["chat/completions", "completions"]

MAX_DEPTH = 128  # JSON nesting levels accepted (orjson encodes at most 254)
SAMPLING_EPS = 1e-5  # vLLM samples greedily below this temperature (SamplingParams)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _StreamOptions(_Open):
    include_usage: StrictBool | None = None
    continuous_usage_stats: StrictBool | None = None


class _Message(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None


class _Request(_Open):
    model: str
    stream: StrictBool | None = False
    stream_options: _StreamOptions | None = None
    return_token_ids: StrictBool | None = None
    temperature: float | None = None


class ChatRequest(_Request):
    messages: list[_Message] = Field(min_length=1)
    logprobs: StrictBool | None = None


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: StrictInt | None = None
    echo: StrictBool | None = None


@dataclass
class CheckedRequest:
    """A request that passed every check, as the client sent it (parsed once)."""

    endpoint: Endpoint
    body: dict[str, Any]
    stream: bool
    sampled: bool = False  # vLLM will sample (temperature unset, or at least SAMPLING_EPS)


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
        body = body_json.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RouterError(400, "request body is not valid JSON") from exc
    if not isinstance(body, dict):
        raise RouterError(400, "request body must be a JSON object")
    check_depth(body)
    return body


def check_depth(body: Any, limit: int = MAX_DEPTH) -> None:
    """400 when containers nest deeper than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, dict | list):
                if depth >= limit:
                    raise RouterError(400, f"JSON nested deeper than {limit} levels")
                stack.append((child, depth + 1))


def check_schema(endpoint: Endpoint, body: dict[str, Any]) -> _Request:
    """The validated request; 400 naming the invalid fields (never their values)."""
    model = ChatRequest if endpoint == "chat/completions" else CompletionRequest
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        where = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        raise RouterError(400, "invalid request: " + ", ".join(where[:5]),
                          param=where[0] if where else None) from exc


def _parts(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for message in body["messages"]:
        content = message.get("content")
        yield from content if isinstance(content, list) else ()


async def _check_parts(body: dict[str, Any], max_images: int, allowed_hosts: list[str]) -> None:
    """Check every URL of every content part (as vLLM reads parts) and count the images."""
    images = 0
    for raw in _parts(body):
        part = classify(raw)
        for _key, url in part.urls:
            await check_media_url(url, allowed_hosts)
        if part.modality == "image":
            images += 1
            if images > max_images:
                raise RouterError(400, f"more than {max_images} images", param="messages")


async def check_request(endpoint: Endpoint, raw: bytes, *, max_images: int,
                        allowed_hosts: list[str]) -> CheckedRequest:
    """Parse and check one request body (see the module docstring for the order)."""
    body = parse_json(raw)
    request = check_schema(endpoint, body)
    if endpoint == "chat/completions":
        await _check_parts(body, max_images, allowed_hosts)
    temperature = request.temperature
    return CheckedRequest(endpoint=endpoint, body=body, stream=bool(request.stream),
                          sampled=temperature is None or temperature >= SAMPLING_EPS)


def _hashed(part: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The part with every URL replaced by its hash, and the image's hash if it is one
    (of its URL, else of its uuid: an image vLLM takes from its cache)."""
    read = classify(part)
    if not read.urls:
        image = read.modality == "image"
        return part, record_hash("uuid:" + str(read.uuid)) if image else None
    kept = dict(part)
    digests: list[tuple[str, str]] = []  # (url, digest): each URL hashed once; no set or
    for key, url in read.urls:  # dict keyed by a ~250 KB data URL (hashing it costs ~70 us)
        digest = next((d for u, d in digests if u is url or u == url), None)
        if digest is None:
            digest = record_hash(url)
            digests.append((url, digest))
        value = kept[key]
        kept[key] = {**value, "url": digest} if isinstance(value, dict) else digest
    return kept, digests[0][1] if read.modality == "image" else None


def identify(checked: CheckedRequest, keep_text: bool) -> Identity:
    """Fingerprint a checked request (off the latency path: hashing 1 MB costs ~0.2 ms)."""
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
                kept, digest = _hashed(part)
                if digest is not None:
                    hashes.append(digest)
                elif classify(part).modality == "text":
                    texts.append(str(part.get("text", "")))
                parts.append(kept)
            messages.append({**message, "content": parts})
        canonical = {**body, "messages": messages}
    else:
        prompt = body["prompt"]
        texts = [prompt] if isinstance(prompt, str) else [str(p) for p in prompt]
    fingerprint = blake3.blake3(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return Identity(fingerprint, hashes, "\n".join(texts) if keep_text else None)
