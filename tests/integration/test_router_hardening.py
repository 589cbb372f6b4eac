"""Issue 15 findings against the real router app and real local upstreams: hostile or odd
requests get a clear 4xx (no arm called), sampled requests follow ``seeded_sampling``, and
arms that answer something vLLM would not (an error event, JSON of the wrong shape) are
recorded as failures without leaving the client hanging."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.support.fake_upstream import FakeUpstream, Knobs
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.model.records import REQUEST_ID_HEADER
from abserve.traffic.run_state import discover_model
from abserve.traffic.sender import API_KEY_ENV

pytestmark = pytest.mark.timeout(60)

KEY = "hardening-key-0123456789"
AUTH = {"authorization": f"Bearer {KEY}"}
METADATA = "http://169.254.169.254/latest/meta-data/"
DATA = "data:image/png;base64,AAAA"
URL = "/v1/chat/completions"


def body(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": "hi"}, *parts]
    return {"model": "fake-model", "messages": [{"role": "user", "content": content}],
            "max_tokens": 4, "temperature": 0, **extra}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Iterator[tuple[RouterServer, ListSink, FakeUpstream, FakeUpstream]]:
    """A router with an API key and the default ``seeded_sampling: refuse``."""
    tmp: Path = tmp_path_factory.mktemp("hardening")
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url}, tmp, dev_mode=False, api_key=KEY,
                                max_images=3, allowed_media_hosts=["8.8.8.8", "169.254.169.254",
                                                                   "127.0.0.1"],
                                seeded_sampling="refuse")
        sink = ListSink()
        with RouterServer(settings, sink) as router:
            yield router, sink, a, b


def post(router: RouterServer, json: Any = None, content: bytes | None = None) -> httpx.Response:
    return httpx.post(router.url + URL, json=json, content=content, headers=AUTH, timeout=20)


def settle(router: RouterServer, timeout_s: float = 10.0) -> None:
    """Wait until the router has no exchange in flight (every arm call ended)."""
    deadline = time.monotonic() + timeout_s
    while router.app.state.router.recorder.admitted:
        assert time.monotonic() < deadline, "exchanges still in flight"
        time.sleep(0.02)


def refused(guarded, payload: dict[str, Any] | bytes) -> httpx.Response:
    """Post ``payload``; assert an OpenAI-style 400 and that no arm was called."""
    router, _sink, a, b = guarded
    settle(router)  # an earlier exchange's shadow may not have reached its arm yet
    before = a.observed.requests + b.observed.requests
    raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    resp = post(router, content=raw)
    assert resp.status_code == 400, resp.text
    assert set(resp.json()["error"]) == {"message", "type", "param", "code"}
    assert a.observed.requests + b.observed.requests == before
    return resp


def recorded(guarded, resp: httpx.Response) -> Any:
    """The record of the exchange that answered ``resp``."""
    return find_record(guarded[1], resp.headers[REQUEST_ID_HEADER])


def find_record(sink: ListSink, request_id: str, timeout_s: float = 5.0) -> Any:
    """The record with this request id, waiting for it up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for exchange in list(sink.exchanges):
            if exchange.request_id == request_id:
                return exchange
        time.sleep(0.005)
    raise AssertionError(f"exchange {request_id} was not recorded")


# item 5: every place vLLM 0.32 takes a media URL from
@pytest.mark.parametrize("part", [
    {"type": "input_image", "image_url": METADATA, "detail": "auto"},
    {"type": "text", "text": "x", "uuid": "u", "image_url": {"url": METADATA}},
    {"type": "text", "uuid": "u", "video_url": {"url": "http://127.0.0.1:8000/v.mp4"}},
    {"type": "text", "uuid": "u", "audio_url": {"url": "http://[::1]/a.wav"}},
    {"image_url": METADATA},
])
def test_media_urls_are_checked_wherever_vllm_reads_them(guarded, part) -> None:
    assert "refused" in refused(guarded, body(part)).json()["error"]["message"]


def test_images_of_every_shape_count_toward_the_limit(guarded) -> None:
    router = guarded[0]
    shapes: list[dict[str, Any]] = [{"type": "input_image", "image_url": DATA, "detail": "auto"},
              {"type": "text", "uuid": "u", "image_url": {"url": DATA}},
              {"image_url": {"url": DATA}}]
    assert post(router, json=body(*shapes)).status_code == 200
    for shape in shapes:
        assert "more than 3 images" in refused(guarded, body(*shapes, shape)).text


# items 6 and 9: odd shapes are a clear 400, never a 500 or a stream
@pytest.mark.parametrize("payload", [
    body({"type": ["text"], "text": "x"}), body({"type": {"a": 1}}),
    body(stream=True, stream_options="yes"), body(stream="false"), body(stream=1),
    body(stream=True, stream_options={"include_usage": "yes"}), body(logprobs="false"),
    body(return_token_ids="no"),
])
def test_odd_field_types_are_400(guarded, payload) -> None:
    refused(guarded, payload)


def test_nesting_that_cannot_be_recorded_is_refused(guarded) -> None:
    deep = b"[" * 300 + b"]" * 300
    raw = orjson.dumps(body(logprobs=False))[:-1] + b',"extra":' + deep + b"}"
    assert "nested deeper" in refused(guarded, raw).text
    raw = orjson.dumps(body())[:-1] + b',"extra":' + deep + b"}"  # forwarded raw before: 200
    refused(guarded, raw)                                          # but never recorded
    ok = orjson.dumps(body(logprobs=False))[:-1] + b',"extra":' + b"[" * 100 + b"]" * 100 + b"}"
    resp = post(guarded[0], content=ok)
    assert resp.status_code == 200
    assert recorded(guarded, resp).arms["a"].ok


def test_a_string_stream_false_is_never_streamed(guarded) -> None:
    resp = refused(guarded, body(stream="false"))
    assert resp.headers["content-type"].startswith("application/json")


# item 1: sampled requests
@pytest.mark.parametrize("extra", [{}, {"temperature": None}, {"temperature": 0.7},
                                   {"temperature": 1, "seed": 3}])
def test_sampled_requests_are_refused_by_default_with_how_to_send_them(guarded, extra) -> None:
    payload = {k: v for k, v in body(**extra).items() if k != "temperature" or extra}
    message = refused(guarded, payload).json()["error"]
    assert message["param"] == "temperature"
    assert "temperature 0" in message["message"]


def test_greedy_requests_get_the_same_seed_on_every_arm(guarded) -> None:
    router, _sink, a, b = guarded
    for temperature in (0, 0.0, 1e-6):
        resp = post(router, json=body(temperature=temperature, stream=True))
        assert resp.status_code == 200
        assert resp.text.endswith("data: [DONE]\n\n")
        b.observed.wait_for_bodies(len(a.observed.bodies))  # b is a shadow: it may still be receiving
        assert a.observed.bodies[-1]["seed"] == b.observed.bodies[-1]["seed"]


def test_allowed_sampling_sends_the_same_seed_to_both_arms(tmp_path) -> None:
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url}, tmp_path, seeded_sampling="allow",
                                default_seed=11)
        with RouterServer(settings, ListSink()) as router:
            unset = {k: v for k, v in body().items() if k != "temperature"}
            for payload, seed in ((unset, 11), (body(temperature=0.8, seed=5), 5)):
                assert httpx.post(router.url + URL, json=payload).status_code == 200
                b.observed.wait_for_bodies(len(a.observed.bodies))  # b is a shadow
                assert a.observed.bodies[-1]["seed"] == b.observed.bodies[-1]["seed"] == seed


def test_allowed_sampling_without_a_fixed_seed_needs_the_clients_seed(tmp_path) -> None:
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url}, tmp_path, seeded_sampling="allow",
                                seed_policy="none")
        with RouterServer(settings, ListSink()) as router:
            resp = httpx.post(router.url + URL, json=body(temperature=0.8))
            assert resp.status_code == 400
            assert resp.json()["error"]["param"] == "seed"
            assert a.observed.requests == b.observed.requests == 0
            assert httpx.post(router.url + URL, json=body(temperature=0.8, seed=4)
                              ).status_code == 200
            b.observed.wait_for_bodies(len(a.observed.bodies))  # b is a shadow
            assert a.observed.bodies[-1]["seed"] == b.observed.bodies[-1]["seed"] == 4


# item 7: arms that answer what vLLM would not
ERROR_EVENT = (b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
               b'"delta":{"content":"x"},"token_ids":[5],"finish_reason":null}]}\n\n'
               b'data: {"error":{"message":"engine died","type":"InternalServerError",'
               b'"param":null,"code":500}}\n\ndata: [DONE]\n\n')


@pytest.fixture
def pair(tmp_path) -> Iterator[tuple[RouterServer, ListSink, FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        sink = ListSink()
        with RouterServer(dev_settings({"a": a.url, "b": b.url}, tmp_path), sink) as router:
            yield router, sink, a, b


@pytest.mark.parametrize("arm", ["a", "b"])
def test_an_error_event_then_done_is_recorded_as_a_failure(pair, arm) -> None:
    router, sink, a, b = pair
    (a if arm == "a" else b).knobs = Knobs(raw=ERROR_EVENT)
    resp = httpx.post(router.url + URL, json=body(stream=True), timeout=10)
    (ex,) = sink.wait_for(1)
    assert resp.status_code == 200
    assert ex.arms[arm].error_class == "http_status"
    assert not ex.arms[arm].ok
    assert "code 500" in (ex.arms[arm].error_detail or "")
    other = "b" if arm == "a" else "a"
    assert ex.arms[other].ok
    if arm == "a":  # the client hears the primary's error event as vLLM sent it
        assert b'"engine died"' in resp.content
        assert resp.text.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize(("raw", "ctype", "stream"), [
    (b"[1]", "application/json", False), (b'{"choices":["x"]}', "application/json", False),
    (b'{"choices":[{"index":0,"message":{"content":5}}]}', "application/json", False),
    (b"data: [1]\n\ndata: [DONE]\n\n", "text/event-stream", True),
    (b'data: {"choices":["x"]}\n\ndata: [DONE]\n\n', "text/event-stream", True),
    (b'data: {"choices":[{"index":0,"token_ids":"ab"}]}\n\ndata: [DONE]\n\n',
     "text/event-stream", True),
])
def test_a_primary_of_the_wrong_shape_is_a_502_not_a_hang(pair, raw, ctype, stream) -> None:
    router, sink, a, _b = pair
    a.knobs = Knobs(raw=raw, raw_type=ctype)
    baseline = router.task_names()
    resp = httpx.post(router.url + URL, json=body(stream=stream), timeout=10)
    (ex,) = sink.wait_for(1)
    assert ex.arms["a"].error_class == "bad_response"
    assert ex.arms["b"].ok
    if stream and resp.status_code == 200:  # the head went out first: an error event
        assert "primary arm failed: bad_response" in resp.text
    else:
        assert resp.status_code == 502
    recorder = router.app.state.router.recorder
    deadline = time.monotonic() + 2
    while recorder.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    left = router.task_names()  # no arm's task left behind, nothing pending
    assert len(left) <= len(baseline)
    assert not [n for n in left if n.startswith("arm-")]
    assert not recorder.pending
    assert recorder.admitted == 0


# item 3: the model lookup of `abserve load --host` carries the router's key
def test_model_lookup_sends_the_api_key(guarded, monkeypatch) -> None:
    router = guarded[0]
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert discover_model(router.url) == "fake-model"
    monkeypatch.delenv(API_KEY_ENV)
    with pytest.raises(ValueError, match="401"):
        discover_model(router.url)
