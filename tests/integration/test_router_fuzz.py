"""A bounded hypothesis fuzz of the router's request shapes, against the real app and real
local fake upstreams: every answer is a 200 that was recorded or an OpenAI-style 4xx;
never a 5xx, never a 200 the store does not get.

Shapes: every top-level field the router reads or adds (``stream``, ``stream_options``,
``temperature``, ``seed``, ``logprobs``, ``top_logprobs``, ``return_token_ids``) with right
and wrong types, messages with text, media parts of every form vLLM reads (typed, ``uuid``,
untyped) and junk parts, an arbitrary extra field, and nesting from shallow to past
orjson's limits (254 to encode, 1024 to parse).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.support.fake_upstream import FakeUpstream
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.model.records import REQUEST_ID_HEADER

pytestmark = pytest.mark.timeout(300)

DATA = "data:image/png;base64,AAAA"
GOOD_URLS = st.sampled_from([DATA, "http://8.8.8.8/x.png"])
BAD_URLS = st.sampled_from(["http://169.254.169.254/", "http://127.0.0.1:1/x.png",
                            "file:///etc/passwd", "", "nonsense", "http://[::1]/"])
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                              st.floats(allow_nan=False, allow_infinity=False),
                              st.text(max_size=4)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=4), inner,
                                                            max_size=3)),
                    max_leaves=8)


def media_parts(urls: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Every form in which vLLM 0.32 takes a media URL from a content part."""
    key = st.sampled_from(["image_url", "video_url", "audio_url"])
    return st.one_of(
        st.builds(lambda k, u: {"type": k, k: {"url": u}}, key, urls),
        st.builds(lambda u: {"type": "input_image", "image_url": u, "detail": "auto"}, urls),
        st.builds(lambda t, k, u: {"type": t, "uuid": "x", k: u},
                  st.sampled_from(["text", "image_url", "nonsense"]), key, urls),
        st.builds(lambda k, u: {k: {"url": u}}, key, urls))


GOOD_PART = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=8)),
    media_parts(GOOD_URLS),
    st.just({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}))
BAD_PART = st.one_of(media_parts(BAD_URLS), JSON, st.dictionaries(
    st.sampled_from(["type", "uuid", "text", "image_url", "input_image", "video_url"]), JSON,
    min_size=1, max_size=3))
GOOD_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system"]),
     "content": st.one_of(st.text(max_size=8), st.lists(GOOD_PART, min_size=1, max_size=4))})
GOOD = {  # values the router forwards (temperature 0: the default refuses sampling)
    "stream": st.one_of(st.booleans(), st.none()),
    "temperature": st.sampled_from([0, 0.0, 1e-6]),
    "seed": st.one_of(st.integers(0, 2**31), st.none()),
    "top_logprobs": st.integers(0, 5),
    "return_token_ids": st.one_of(st.booleans(), st.none()),
    "max_tokens": st.integers(1, 8),
    "extra": JSON,
}
BAD = {  # one of these replaces a good value in half the bodies
    "stream": st.sampled_from(["false", "true", 1, 0, [], {}]),
    "stream_options": st.sampled_from(["yes", 1, [], {"include_usage": "yes"}]),
    "temperature": st.one_of(st.none(), st.just(0.7), st.just("0"), st.text(max_size=2)),
    "logprobs": st.sampled_from(["false", [], {}]),
    "return_token_ids": st.sampled_from(["no", 1, []]),
    "model": JSON,
}


@st.composite
def bodies(draw: st.DrawFn, completion: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "temperature": draw(GOOD["temperature"])}
    if completion:
        body["prompt"] = draw(st.one_of(st.text(max_size=8), st.lists(st.integers(0, 9),
                                                                      min_size=1, max_size=4)))
        body["logprobs"] = draw(st.one_of(st.none(), st.integers(0, 3)))
    else:
        body["messages"] = draw(st.lists(GOOD_MESSAGE, min_size=1, max_size=3))
        body["logprobs"] = draw(st.one_of(st.none(), st.booleans()))
    for name, values in GOOD.items():
        if draw(st.booleans()):
            body[name] = draw(values)
    if body.get("stream") and draw(st.booleans()):
        body["stream_options"] = {"include_usage": draw(st.booleans())}
    how = draw(st.sampled_from(["good", "field", "part", "message"]))
    if how == "field":
        name = draw(st.sampled_from(sorted(BAD)))
        body[name] = draw(BAD[name])
    elif how == "part" and not completion:
        content = body["messages"][0]["content"]
        body["messages"][0]["content"] = [*(content if isinstance(content, list) else []),
                                          draw(BAD_PART)]
    elif how == "message":
        key = "prompt" if completion else "messages"
        body[key] = draw(st.one_of(JSON, st.lists(JSON, max_size=2)))
    return body


DEPTH = st.sampled_from([0] * 8 + [5, 127, 128, 200, 255, 300, 1100])


@pytest.fixture(scope="module")
def router(tmp_path_factory) -> Iterator[tuple[RouterServer, ListSink]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    with FakeUpstream() as a, FakeUpstream() as b:
        sink = ListSink()
        settings_ = dev_settings({"a": a.url, "b": b.url}, tmp, max_images=3,
                                 allowed_media_hosts=["8.8.8.8", "127.0.0.1"],
                                 seeded_sampling="refuse")
        with RouterServer(settings_, sink) as server:
            yield server, sink


def encode(body: dict[str, Any], depth: int) -> bytes:
    """The body, with an extra field nested ``depth`` levels (built as bytes: orjson itself
    cannot encode past 254)."""
    raw = orjson.dumps(body)
    if not depth:
        return raw
    deep = b'{"k":' * (depth - 1) + b"[]" + b"}" * (depth - 1)
    return raw[:-1] + (b"," if len(body) else b"") + b'"deep":' + deep + b"}"


def wait_recorded(sink: ListSink, request_id: str) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if any(x.request_id == request_id for x in list(sink.exchanges)):
            return
        time.sleep(0.005)
    raise AssertionError(f"200 without a record (request {request_id})")


def check(router: tuple[RouterServer, ListSink], path: str, raw: bytes) -> None:
    server, sink = router
    resp = httpx.post(server.url + path, content=raw, timeout=20,
                      headers={"content-type": "application/json"})
    event(f"{path} {resp.status_code}")
    assert resp.status_code < 500, (resp.status_code, resp.text[:300])
    if resp.status_code == 200:
        wait_recorded(sink, resp.headers[REQUEST_ID_HEADER])
        return
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == resp.status_code


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(body=bodies(completion=False), depth=DEPTH)
def test_chat_shapes_give_a_recorded_200_or_a_clear_4xx(router, body, depth) -> None:
    check(router, "/v1/chat/completions", encode(body, depth))


@FUZZ
@given(body=bodies(completion=True), depth=DEPTH)
def test_completion_shapes_give_a_recorded_200_or_a_clear_4xx(router, body, depth) -> None:
    check(router, "/v1/completions", encode(body, depth))
