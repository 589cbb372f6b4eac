"""The router against real local upstreams: what clients get, and what gets recorded."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from tests.support.fake_upstream import FakeUpstream, Knobs
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.base.event_stream import payloads
from abserve.store import Store

pytestmark = pytest.mark.timeout(60)

IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake image bytes" * 50).decode()


def chat(stream: bool, **extra: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": "describe the secret-prompt-words"},
               {"type": "image_url", "image_url": {"url": IMAGE}}]
    return {"model": "fake-model", "messages": [{"role": "user", "content": content}],
            "max_tokens": 8, "stream": stream, **extra}


@pytest.fixture
def pair() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


@pytest.fixture
def routed(pair: tuple[FakeUpstream, FakeUpstream],
           tmp_path: Path) -> Iterator[tuple[RouterServer, ListSink]]:
    sink = ListSink()
    settings = dev_settings({"a": pair[0].url, "b": pair[1].url}, tmp_path)
    with RouterServer(settings, sink) as router:
        yield router, sink


def _sse_chunks(text: str) -> list[dict[str, Any]]:
    """Each complete event's JSON, ``[DONE]`` left out (the splitter the router itself uses)."""
    return [orjson.loads(p) for p in payloads(text.encode()) if p != b"[DONE]"]


def _without_ids(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k not in ("id", "created")} for c in chunks]


@pytest.mark.parametrize("extra", [{}, {"logprobs": True, "top_logprobs": 2},
                                   {"return_token_ids": True,
                                    "stream_options": {"include_usage": True}}])
def test_stream_client_gets_what_a_direct_call_returns(routed, pair, extra) -> None:
    router, _sink = routed
    shadow_seen = len(pair[1].observed.bodies)
    direct = httpx.post(f"{pair[0].url}/v1/chat/completions", json=chat(True, **extra))
    via = httpx.post(f"{router.url}/v1/chat/completions", json=chat(True, **extra))
    assert via.status_code == 200
    assert via.text.endswith("data: [DONE]\n\n")
    assert _without_ids(_sse_chunks(via.text)) == _without_ids(_sse_chunks(direct.text))
    assert via.headers["x-abserve-request-id"]
    # every arm was asked for token ids, top-k logprobs, usage and the same seed
    asked = pair[0].observed.bodies[-1]
    assert asked == pair[1].observed.wait_for_bodies(shadow_seen + 1)[-1]  # the shadow may lag
    assert asked["return_token_ids"]
    assert asked["logprobs"]
    assert asked["seed"] == 0
    assert asked["stream_options"]["include_usage"]


def test_nonstream_client_gets_what_a_direct_call_returns(routed, pair) -> None:
    router, _ = routed
    direct = httpx.post(f"{pair[0].url}/v1/chat/completions", json=chat(False)).json()
    via = httpx.post(f"{router.url}/v1/chat/completions", json=chat(False))
    assert via.status_code == 200
    assert _without_ids([via.json()]) == _without_ids([direct])


def test_record_has_every_arm_tokens_times_and_logprobs(routed, pair) -> None:
    router, sink = routed
    resp = httpx.post(f"{router.url}/v1/chat/completions", json=chat(True),
                      headers={"x-abserve-profile": "few-images", "x-abserve-items": "1"})
    (ex,) = sink.wait_for(1)
    assert ex.request_id == resp.headers["x-abserve-request-id"]
    assert ex.tags == {"profile": "few-images", "items": "1"}
    assert ex.image_hashes
    assert ex.image_hashes[0].startswith("xxh3-128:")
    assert ex.prompt_text is None
    assert "base64" not in ex.model_dump_json()
    assert set(ex.arms) == {"a", "b"}
    for arm in ex.arms.values():
        assert arm.ok
        assert arm.status == 200
        assert arm.finish_reason == "length"
        assert len(arm.token_ids) == 8 == len(arm.token_times) == len(arm.logprobs)
        assert len(arm.logprobs[0].top) == 5
        assert arm.logprobs[0].token_id == arm.token_ids[0]
        assert arm.vllm_request_id
        assert arm.vllm_request_id.startswith("chatcmpl-")
        assert arm.usage == {"prompt_tokens": 5, "total_tokens": 13, "completion_tokens": 8}
        assert 0 <= arm.t_send <= arm.t_first_byte <= arm.t_first_token <= arm.t_end
    assert ex.arms["a"].token_ids == ex.arms["b"].token_ids


def test_completions_endpoint_streams_and_records(routed, pair) -> None:
    router, sink = routed
    body = {"model": "fake-model", "prompt": "hello", "max_tokens": 8, "stream": True}
    direct = httpx.post(f"{pair[0].url}/v1/completions", json=body)
    via = httpx.post(f"{router.url}/v1/completions", json=body)
    assert _without_ids(_sse_chunks(via.text)) == _without_ids(_sse_chunks(direct.text))
    (ex,) = sink.wait_for(1)
    assert ex.endpoint == "completions"
    assert len(ex.arms["b"].logprobs) == 8


def test_official_openai_client_works_unchanged(routed) -> None:
    router, sink = routed
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused-in-dev-mode")
    msgs = chat(False)["messages"]
    full = client.chat.completions.create(model="fake-model", messages=msgs, max_tokens=8)
    assert full.choices[0].message.content
    assert full.choices[0].logprobs is None
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="fake-model", messages=msgs, max_tokens=8, stream=True) if c.choices]
    assert "".join(pieces) == full.choices[0].message.content
    assert [m.id for m in client.models.list()] == ["fake-model"]
    sink.wait_for(2)


def test_mismatch_metric_counts_disagreeing_arm(pair, tmp_path) -> None:
    pair[1].knobs = Knobs(token_offset=1)
    sink = ListSink()
    with RouterServer(dev_settings({"a": pair[0].url, "b": pair[1].url}, tmp_path), sink) as r:
        httpx.post(f"{r.url}/v1/chat/completions", json=chat(True))
        sink.wait_for(1)
        text = httpx.get(f"{r.url}/metrics").text
    assert 'abserve_router_arm_mismatches_total{arm="b"} 1.0' in text
    assert 'abserve_router_arm_requests_total{arm="a"} 1.0' in text
    assert "abserve_router_arm_ttft_seconds_bucket" in text


def test_records_persist_in_the_real_store(pair, tmp_path) -> None:
    settings = dev_settings({"a": pair[0].url, "b": pair[1].url}, tmp_path)
    with RouterServer(settings) as r:
        for _ in range(3):
            assert httpx.post(f"{r.url}/v1/chat/completions", json=chat(True)).status_code == 200
    store = Store.open(settings.effective_database_url)
    records = list(store.iter_exchanges("test-run"))
    run = store.get_run("test-run")
    assert len(records) == 3
    assert run is not None
    assert run.status == "completed"
    assert all(len(x.arms["b"].token_ids) == 8 for x in records)
    assert "api_key" not in orjson.dumps(run.config).decode()


def test_probes(routed, pair) -> None:
    router, _ = routed
    assert httpx.get(f"{router.url}/livez").json() == {"status": "ok"}
    ready = httpx.get(f"{router.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["arms"] == {"a": True, "b": True}


def test_fingerprint_hashes_images_and_text_is_stored_only_when_configured(pair, tmp_path) -> None:
    other = "data:image/png;base64," + base64.b64encode(b"another image").decode()
    second = chat(True)
    second["messages"][0]["content"][1]["image_url"]["url"] = other
    for keep in (False, True):
        sink = ListSink()
        settings = dev_settings({"a": pair[0].url, "b": pair[1].url}, tmp_path,
                                store_prompt_text=keep)
        with RouterServer(settings, sink) as r:
            for b in (chat(True), chat(True), second):
                httpx.post(f"{r.url}/v1/chat/completions", json=b)
            x, y, z = sink.wait_for(3)
        assert x.fingerprint == y.fingerprint != z.fingerprint
        assert x.image_hashes != z.image_hashes
        assert (x.prompt_text is not None and "secret-prompt-words" in x.prompt_text) == keep
        assert IMAGE[30:80] not in x.model_dump_json()
