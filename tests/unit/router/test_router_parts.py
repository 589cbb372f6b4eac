"""Content parts as vLLM reads them (``openai_request.parts``), and the router's checks built on them:
every media URL vLLM would load is checked, and every image counts toward the limit."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from abserve.base.url_hash import record_hash
from abserve.openai_request.errors import RouterError
from abserve.openai_request.parts import classify
from abserve.openai_request.validation import CheckedRequest, check_request, identify

METADATA = "http://169.254.169.254/latest/meta-data"
LOOPBACK = "http://127.0.0.1:8000/x.png"
PUBLIC = "http://8.8.8.8/cat.png"
DATA = "data:image/png;base64,AAAA"
# The attacker may name the addresses: the allowlist alone must not let them through.
ALLOW = ["8.8.8.8", "169.254.169.254", "127.0.0.1"]

# Parts that vLLM 0.32 loads media from (its own parser says so: test_router_parts_vllm.py)
# and that the router used to pass unchecked.
BYPASSES: list[dict[str, Any]] = [
    {"type": "input_image", "image_url": METADATA, "detail": "auto"},  # URL: image_url
    {"type": "text", "text": "hi", "uuid": "u1", "image_url": {"url": METADATA}},
    {"type": "text", "text": "hi", "uuid": "u2", "image_url": LOOPBACK},
    {"type": "text", "uuid": 0, "video_url": {"url": METADATA}},
    {"type": "refusal", "uuid": "u3", "audio_url": {"url": LOOPBACK}},
    {"type": "image_url", "uuid": "u4", "image_url": {"url": METADATA}},
    {"uuid": "u5", "video_url": METADATA},
    {"image_url": {"url": METADATA}},  # no type at all
    {"type": None, "audio_url": LOOPBACK},
    {"type": ["text"], "uuid": "u6", "image_url": METADATA},
    {"type": "text", "text": "vLLM ignores it, the router checks it", "image_url": METADATA},
]


def chat(*parts: dict[str, Any]) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": list(parts)}]})


async def checked(raw: bytes, max_images: int = 8) -> CheckedRequest:
    return await check_request("chat/completions", raw, max_images=max_images,
                               allowed_hosts=ALLOW)


@pytest.mark.parametrize("part", BYPASSES)
async def test_every_media_url_vllm_would_load_is_checked(part: dict[str, Any]) -> None:
    with pytest.raises(RouterError) as err:
        await checked(chat(part))
    assert err.value.status == 400
    assert "refused" in err.value.message


@pytest.mark.parametrize("url", [PUBLIC, DATA])
async def test_the_same_shapes_pass_with_allowed_urls(url: str) -> None:
    for part in BYPASSES[:-2]:
        text = orjson.dumps(part).decode().replace(METADATA, url).replace(LOOPBACK, url)
        await checked(chat(orjson.loads(text)))


def test_classify_follows_vllms_reading() -> None:
    assert classify({"type": "input_image", "image_url": PUBLIC}).modality == "image"
    assert classify({"type": "input_image", "image_url": PUBLIC}).urls == (("image_url", PUBLIC),)
    assert classify({"type": "text", "text": "x"}).modality == "text"
    assert classify({"type": "output_text", "text": "x"}).modality == "text"
    uuid_text = classify({"type": "text", "uuid": "u", "image_url": PUBLIC})
    assert (uuid_text.modality, uuid_text.uuid) == ("image", "u")
    # the first media key in vLLM's order decides the modality; every URL is still listed
    both = classify({"uuid": "u", "video_url": DATA, "image_url": {"url": PUBLIC}})
    assert both.modality == "image"
    assert len(both.urls) == 2
    assert classify({"uuid": "u", "image_url": None}).urls == ()  # cached by uuid
    assert classify({"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}
                    ).modality == "audio"


@pytest.mark.parametrize("part", [
    {"type": ["text"], "text": "x"}, {"type": {"a": 1}}, {"type": 3}, {"type": "text", "uuid": "u"},
    {}, {"type": "image_embeds", "image_embeds": "AAAA"}, {"uuid": "u", "image_embeds": "AA"},
    {"type": "image_pil"}, {"type": "tool_reference", "name": "t"}, {"type": "image_url"},
    {"type": "image_url", "image_url": {"url": 3}}, {"type": "image_url", "image_url": [DATA]},
    {"type": "input_audio", "input_audio": "AA"}, {"type": "nonsense"}, {"uuid": "u", "x": 1},
])
async def test_parts_the_router_does_not_serve_are_400(part: dict[str, Any]) -> None:
    with pytest.raises(RouterError) as err:
        await checked(chat({"type": "text", "text": "ok"}, part))
    assert err.value.status == 400


async def test_images_of_every_shape_count_toward_the_limit() -> None:
    shapes: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": DATA}},
              {"type": "input_image", "image_url": DATA, "detail": "low"},
              {"type": "text", "uuid": "u", "image_url": DATA},
              {"uuid": "v", "image_url": None},
              {"image_url": {"url": DATA}}]
    await checked(chat(*shapes), max_images=len(shapes))
    for shape in shapes:  # each one is the image too many
        with pytest.raises(RouterError, match="more than"):
            await checked(chat(*shapes[:2], shape), max_images=2)
    await checked(chat({"type": "video_url", "video_url": {"url": DATA}}), max_images=0)


async def test_identify_hashes_every_image_and_keeps_no_url() -> None:
    shapes: list[dict[str, Any]] = [{"type": "input_image", "image_url": DATA, "detail": "low"},
              {"type": "text", "uuid": "u", "image_url": {"url": PUBLIC}},
              {"uuid": "v", "image_url": None},
              {"type": "audio_url", "audio_url": {"url": DATA}},
              {"type": "text", "text": "words"}]
    ident = identify(await checked(chat(*shapes)), keep_text=True)
    assert len(ident.image_hashes) == 3
    assert all(h.startswith("xxh3-128:") for h in ident.image_hashes)
    assert ident.image_hashes[0] == record_hash(DATA)
    assert ident.prompt_text == "words"
    other = identify(await checked(chat(*shapes[:-1], {"type": "text", "text": "other"})), True)
    assert other.image_hashes == ident.image_hashes
    assert other.fingerprint != ident.fingerprint
