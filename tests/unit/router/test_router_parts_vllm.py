"""What the router accepts, read by vLLM 0.32's own content-part parser: every media URL vLLM
would load was checked by the router, and every image vLLM counts was counted.

Bodies come from hypothesis (bounded) and from the known bypasses; each one the router
accepts is parsed part by part with ``vllm.renderers.chat_utils._parse_chat_message_content_part``
and a recording media parser standing in for vLLM's (which would fetch the URLs).
No vLLM server is started; importing vLLM takes ~20 s on the development machine.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.unit.router.test_router_parts import ALLOW, BYPASSES, DATA, LOOPBACK, METADATA, PUBLIC
from vllm.renderers.chat_utils import (
    BaseMultiModalContentParser,
    _parse_chat_message_content_part,
)

from abserve.openai_request.errors import RouterError
from abserve.openai_request.media_urls import check_media_url
from abserve.openai_request.validation import check_request

# imports torch and vLLM: make test runs it, make test-fast does not even collect it
pytestmark = pytest.mark.slow

MAX_IMAGES = 3


class Recorder(BaseMultiModalContentParser):
    """vLLM's media parser interface; records what vLLM would load instead of loading it."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[tuple[str, str]] = []  # (modality, URL)
        self.images = 0

    @property
    def model_config(self) -> Any:
        return SimpleNamespace(enable_prompt_embeds=False)

    def _load(self, modality: str, url: str | None) -> None:
        if modality == "image":
            self.images += 1
        if url:
            self.loaded.append((modality, url))

    def parse_image(self, image_url: str | None, uuid: str | None = None) -> None:
        self._load("image", image_url)

    def parse_audio(self, audio_url: str | None, uuid: str | None = None) -> None:
        self._load("audio", audio_url)

    def parse_video(self, video_url: str | None, uuid: str | None = None) -> None:
        self._load("video", video_url)

    def parse_input_audio(self, input_audio: Any, uuid: str | None = None) -> None:
        data = (input_audio or {}).get("data")  # vLLM: data:audio/<format>;base64,<data>
        self._load("audio", f"data:audio/x;base64,{data}" if data else None)

    def parse_image_pil(self, image_pil: Any, uuid: str | None = None) -> None:
        self.images += 1

    def parse_image_embeds(self, image_embeds: Any, uuid: str | None = None) -> None:
        self.images += 1

    def parse_audio_embeds(self, audio_embeds: Any, uuid: str | None = None) -> None:
        pass

    def parse_video_embeds(self, video_embeds: Any, uuid: str | None = None) -> None:
        pass

    def parse_prompt_embeds(self, data: str) -> None:
        pass


def vllm_reads(body: dict[str, Any]) -> Recorder:
    """Every media item vLLM's parser would load for ``body``'s messages."""
    recorder = Recorder()
    for message in body["messages"]:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            try:
                _parse_chat_message_content_part(part, recorder, wrap_dicts=False,
                                                 interleave_strings=False)
            except Exception:  # vLLM refuses the part (its 4xx): nothing is loaded after it
                return recorder
    return recorder


async def assert_router_covers_vllm(body: dict[str, Any]) -> bool:
    """If the router accepts ``body``, vLLM loads only allowed URLs and at most the limit
    of images; returns whether the router accepted it."""
    try:
        await check_request("chat/completions", orjson.dumps(body), max_images=MAX_IMAGES,
                            allowed_hosts=ALLOW)
    except RouterError as exc:
        assert exc.status == 400
        return False
    read = vllm_reads(body)
    for _modality, url in read.loaded:
        await check_media_url(url, ["8.8.8.8"])  # only the one public allowed host passes
    assert read.images <= MAX_IMAGES
    return True


def test_vllm_loads_media_from_every_known_bypass() -> None:
    """The bypasses are real: vLLM's parser loads a URL from each (but the last, a URL
    vLLM ignores and the router checks anyway)."""
    for part in BYPASSES[:-1]:
        loaded = vllm_reads({"messages": [{"role": "user", "content": [part]}]}).loaded
        assert [url for _, url in loaded] in ([METADATA], [LOOPBACK]), part


async def test_known_bypasses_are_refused_before_vllm_sees_them() -> None:
    for part in BYPASSES:
        body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
        assert not await assert_router_covers_vllm(body)


URLS = st.sampled_from([DATA, PUBLIC, METADATA, LOOPBACK, "file:///etc/passwd",
                        "http://example.com/x.png", "", "http://8.8.8.8@127.0.0.1/"])
URL_VALUES = st.one_of(URLS, st.builds(lambda u: {"url": u}, URLS), st.none(),
                       st.integers(-3, 3), st.lists(URLS, max_size=1))
TYPES = st.one_of(st.sampled_from(["text", "input_text", "output_text", "refusal", "thinking",
                                   "image_url", "input_image", "audio_url", "video_url",
                                   "input_audio", "image_embeds", "tool_reference", "other"]),
                  st.none(), st.just(["text"]), st.just({"t": 1}), st.integers(-3, 3))
PART = st.fixed_dictionaries(
    {},
    optional={"type": TYPES, "uuid": st.one_of(st.none(), st.text(max_size=3), st.integers(-3, 3)),
              "text": st.text(max_size=5), "image_url": URL_VALUES, "audio_url": URL_VALUES,
              "video_url": URL_VALUES, "input_image": URL_VALUES,
              "detail": st.just("auto"),
              "input_audio": st.one_of(st.none(), st.just({"data": "AAAA", "format": "wav"}),
                                       st.text(max_size=3))})
MEDIA_KEY = st.sampled_from(["image_url", "audio_url", "video_url"])
LIKELY = st.sampled_from([DATA, DATA, PUBLIC, PUBLIC, METADATA, LOOPBACK])
SHAPED = st.one_of(  # the shapes vLLM loads media from, mostly with URLs the router allows
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, LIKELY),
    st.builds(lambda u: {"type": "input_image", "image_url": u, "detail": "auto"}, LIKELY),
    st.builds(lambda k, u: {"type": k, k: {"url": u}}, MEDIA_KEY, LIKELY),
    st.builds(lambda t, k, u: {"type": t, "uuid": "x", k: u}, TYPES, MEDIA_KEY, LIKELY),
    st.builds(lambda k, u: {k: {"url": u}}, MEDIA_KEY, LIKELY),
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5)))
BODY = st.builds(lambda parts: {"model": "m", "messages": [{"role": "user", "content": parts}]},
                 st.lists(st.one_of(SHAPED, PART), min_size=1, max_size=4))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODY)
async def test_every_body_the_router_accepts_loads_only_checked_media(body: dict[str, Any]) -> None:
    accepted = await assert_router_covers_vllm(body)
    media = bool(vllm_reads(body).loaded)
    event(f"router {'accepted' if accepted else 'refused'}, vLLM loads {'media' if media else 'none'}")


@pytest.mark.parametrize("n", [MAX_IMAGES, MAX_IMAGES + 1])
async def test_image_count_matches_vllms(n: int) -> None:
    shapes = [{"type": "input_image", "image_url": DATA, "detail": "low"},
              {"type": "text", "uuid": "u", "image_url": DATA},
              {"image_url": {"url": DATA}}, {"type": "image_url", "image_url": {"url": DATA}}]
    body = {"model": "m", "messages": [{"role": "user", "content": shapes[:n]}]}
    assert vllm_reads(body).images == n
    assert await assert_router_covers_vllm(body) is (n <= MAX_IMAGES)
