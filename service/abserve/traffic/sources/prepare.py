"""Make an imported request sendable, or say exactly why it is not: the router's rules, early.

``prepare`` checks one request the way the run's router will (its schema, its image count,
its body limit, its media rule: ``abserve.openai_request.media_urls.media_host`` with the
hosts the router AND the arms allow) so a file that would be refused halfway is refused before the
first request. Images named by a local path (relative to the traffic file, ``file://``
allowed) are read and inlined as data URLs; ``http(s)`` URLs are only checked, never fetched.
A request that asks for sampling is sent as it is when the router allows seeded sampling,
made greedy (temperature 0, tagged ``sampling=forced-greedy``) when the source opts in, else
refused with ``SamplingRefused``. The result is a ``CorpusEntry`` with the tags every
generated request carries (profile, items, token-estimate, corpus-index) and ``source-line``;
a turn of a session also carries its session's tags and affinity header (``turns.Turn``), a
request whose reader knows whether its prefix is shared (``Imported.shared_prefix``) the
``shared-prefix`` tag.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import os
import stat
from pathlib import Path
from typing import Any

import orjson
from PIL import Image, UnidentifiedImageError

from abserve.model.records import TAG_HEADER_PREFIX
from abserve.openai_request.errors import RouterError
from abserve.openai_request.media_urls import media_host
from abserve.openai_request.parts import classify
from abserve.openai_request.validation import SAMPLING_EPS, check_depth, check_schema
from abserve.traffic.corpus import CorpusEntry, check_tags
from abserve.traffic.images import data_url_bytes
from abserve.traffic.sources.imported import ENDPOINT_PATHS, Imported, LineError
from abserve.traffic.sources.spec import FileSource
from abserve.traffic.turns import SHARED_TAG, Turn

TOKENS_PER_IMAGE_ESTIMATE = 4  # the token-estimate tag's guess (the profiles' default)
_MIMES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp",
          "BMP": "image/bmp"}


class SamplingRefused(LineError):
    """A request that asks for sampling, which this run's router refuses."""


def prepare(imp: Imported, src: FileSource, base: Path, ordinal: int,
            turn: Turn | None = None) -> CorpusEntry:
    """The entry to send for ``imp`` (the ``ordinal``-th accepted request, ``turn`` of its
    session), or ``LineError``."""
    body = imp.body
    if src.model:
        body["model"] = src.model
    elif not isinstance(body.get("model"), str):
        raise LineError("the request names no 'model' (give the run's model: --model)")
    images: list[bytes] = []
    if imp.endpoint == "chat/completions":
        images = _inline_images(body, src, base)
    if len(images) > src.max_images:
        raise LineError(f"{len(images)} images, over the router's max_images ({src.max_images})")
    try:
        check_depth(body)
        check_schema(imp.endpoint, body)
    except RouterError as exc:
        raise LineError(f"the router would refuse it: {exc.message}") from None
    sampling = _sampling(body, src)
    raw = orjson.dumps(body)
    if len(raw) > src.max_body_bytes:
        raise LineError(f"body is {len(raw)} bytes, over the router's max_body_bytes "
                        f"({src.max_body_bytes})")
    try:
        own = check_tags(imp.tags)
    except ValueError as exc:
        raise LineError(str(exc)) from None
    estimate = len(_text_of(imp, body).split()) + TOKENS_PER_IMAGE_ESTIMATE * len(images)
    tags = {**own, "profile": src.label, "items": str(len(images)),
            "token-estimate": str(estimate), "corpus-index": str(ordinal),
            "source-line": str(imp.line), **({"sampling": sampling} if sampling else {})}
    if imp.shared_prefix is not None and turn is None:
        tags[SHARED_TAG] = "yes" if imp.shared_prefix else "no"
    headers = {f"{TAG_HEADER_PREFIX}{k}": v for k, v in tags.items()}
    if turn is not None:
        headers |= turn.headers()
    return CorpusEntry(ordinal, raw, headers, len(images), sum(map(len, images)),
                       tuple(hashlib.sha256(b).hexdigest() for b in images), estimate,
                       path=ENDPOINT_PATHS[imp.endpoint], turn=turn)


def asks_for_sampling(body: dict[str, Any]) -> bool:
    """vLLM samples when ``temperature`` is unset or at least its epsilon (as the router reads it)."""
    temperature = body.get("temperature")
    if temperature is None:
        return True
    return not isinstance(temperature, int | float) or temperature >= SAMPLING_EPS


def _sampling(body: dict[str, Any], src: FileSource) -> str | None:
    if not asks_for_sampling(body):
        return None
    if src.seeded_sampling == "allow":
        return "seeded"
    if src.greedy:
        body["temperature"] = 0.0
        return "forced-greedy"
    raise SamplingRefused("the request asks for sampling and the router refuses it "
                          "(set greedy: true, or the router's seeded_sampling: allow)")


def _inline_images(body: dict[str, Any], src: FileSource, base: Path) -> list[bytes]:
    """Inline every local image path, check every URL; the image bytes, in prompt order."""
    images: list[bytes] = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            images += _part_images(part, src, base)
    return images


def _part_images(part: Any, src: FileSource, base: Path) -> list[bytes]:
    if isinstance(part, dict) and isinstance(part.get("image_url"), dict | str):
        ref = part["image_url"]
        url = ref.get("url") if isinstance(ref, dict) else ref
        if isinstance(url, str) and not _is_url(url):
            data_url = _read_image(url, base)
            part["image_url"] = {**ref, "url": data_url} if isinstance(ref, dict) else data_url
    try:
        read = classify(part)
    except RouterError as exc:
        raise LineError(f"content part: {exc.message}") from None
    out: list[bytes] = []
    for _key, url in read.urls:
        if url[:5].lower() == "data:":
            out.append(_data_bytes(url))
            continue
        try:
            media_host(url, src.allowed_media_hosts)
        except RouterError:
            raise LineError("image URL refused: its host is not allowed by this run's router "
                            "and arms (allowed_media_hosts / allowed_media_domains); abserve "
                            "never fetches it") from None
        out.append(url.encode())
    if read.modality != "image":
        return []
    return out or [str(read.uuid).encode()]


def _is_url(ref: str) -> bool:
    """A URL to check (``data:``, ``http(s)://``, any other scheme: refused by the rule), or a
    local path (``file://`` or none) to inline."""
    head = ref[:16].lower()
    return not head.startswith("file://") and ("://" in head or head.startswith("data:"))


def _read_image(ref: str, base: Path) -> str:
    name = ref.removeprefix("file://")
    path = name if os.path.isabs(name) else os.path.join(base, name)  # one stat, no Path: hot
    try:
        found = os.stat(path)
    except OSError:
        found = None
    if found is None or not stat.S_ISREG(found.st_mode):
        raise LineError(f"image file not found: {Path(path)}")
    return _data_url(path, found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=64)  # 64 images' data URLs at most in memory
def _data_url(path: str, _mtime_ns: int, _size: int) -> str:
    """An image file as a data URL; cached by path, modification time and size, so a file
    whose lines share images (a gateway's log, a data set's pool) reads each one once
    (benchmarks/reach_speed.md); a file changed since is read again."""
    data = Path(path).read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt = image.format or ""
    except (UnidentifiedImageError, OSError):
        raise LineError(f"not an image file: {path}") from None
    mime = _MIMES.get(fmt)
    if mime is None:
        raise LineError(f"image format {fmt or 'unknown'} of {path} (PNG, JPEG, GIF, WEBP, BMP)")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _data_bytes(url: str) -> bytes:
    try:
        return data_url_bytes(url)
    except ValueError:
        raise LineError("a data: URL's base64 is broken") from None


def _text_of(imp: Imported, body: dict[str, Any]) -> str:
    if imp.endpoint == "completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else " ".join(map(str, prompt or []))
    texts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return " ".join(texts)
