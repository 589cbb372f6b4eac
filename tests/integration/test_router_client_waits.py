"""``client_waits_for: all_arms``: the client's response ends only when every arm has ended,
so a client that paces itself on its answers (a benchmark client with a concurrency limit)
keeps every arm at its concurrency, not only the primary. Found in the by-hand flow: with
``vllm bench serve --max-concurrency 2`` and the default (``primary``), the non-primary arm of
two identical vLLM servers sharing a core built up to 24 requests in flight and its TTFT was
15x the primary's (1.6 s against 0.1 s), a latency "regression" of the router's own making.
Real router app, real local upstreams; arm b is the slow one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.test_router_hardening import find_record
from tests.support.fake_upstream import FakeUpstream, Knobs
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.model.records import REQUEST_ID_HEADER, Exchange
from abserve.router import RouterSettings

pytestmark = pytest.mark.timeout(60)

URL = "/v1/chat/completions"
SLOW = 0.6  # arm b's time to first token


def body(stream: bool) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4, "temperature": 0, "stream": stream}


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream(Knobs(first_token_delay_s=SLOW)) as b:
        yield a, b


def timed_post(r: RouterServer, stream: bool) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    resp = httpx.post(r.url + URL, json=body(stream), timeout=20)
    return time.perf_counter() - t0, resp


def serve(upstreams, tmp_path: Path, waits_for: str) -> tuple[RouterServer, ListSink]:
    a, b = upstreams
    sink = ListSink()
    settings = dev_settings({"a": a.url, "b": b.url}, tmp_path, client_waits_for=waits_for)
    return RouterServer(settings, sink), sink


def record(sink: ListSink, resp: httpx.Response) -> Exchange:
    return find_record(sink, resp.headers[REQUEST_ID_HEADER])


def test_default_is_all_arms() -> None:
    settings = RouterSettings(arms={"a": {"url": "http://127.0.0.1:1"}}, dev_mode=True)
    assert settings.client_waits_for == "all_arms"


@pytest.mark.parametrize("stream", [False, True])
def test_all_arms_the_response_ends_when_every_arm_has_ended(upstreams, tmp_path, stream) -> None:
    server, sink = serve(upstreams, tmp_path, "all_arms")
    with server as r:
        elapsed, resp = timed_post(r, stream)
        assert resp.status_code == 200
        exchange = record(sink, resp)
    assert elapsed >= SLOW
    assert exchange.arms["b"].ok
    assert len(exchange.arms["b"].token_ids) == 8
    assert exchange.arms["a"].token_ids == exchange.arms["b"].token_ids
    if stream:
        assert resp.text.rstrip().endswith("data: [DONE]")
    else:
        assert resp.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_primary_the_response_ends_with_the_primarys(upstreams, tmp_path, stream) -> None:
    server, sink = serve(upstreams, tmp_path, "primary")
    with server as r:
        elapsed, resp = timed_post(r, stream)
        assert resp.status_code == 200
        assert record(sink, resp).arms["b"].ok  # b still answers and is recorded
    assert elapsed < SLOW


def overlaps(exchanges: list[Exchange], arm: str) -> int:
    """The most calls to ``arm`` in flight at once, from the recorded times."""
    spans = [(x.started_at + x.arms[arm].t_send, x.started_at + (x.arms[arm].t_end or 0))
             for x in exchanges]
    return max(sum(s <= t < e for s, e in spans) for t, _ in spans)


@pytest.mark.parametrize(("waits_for", "most_in_flight"), [("all_arms", 2), ("primary", 3)])
def test_a_client_at_concurrency_2_keeps_every_arm_at_2_only_with_all_arms(
        upstreams, tmp_path, waits_for, most_in_flight) -> None:
    """Two client workers, each sending its next request when its answer ends (as ``vllm
    bench serve --max-concurrency 2`` does): the slow arm sees at most 2 calls at once with
    ``all_arms``; with ``primary`` its calls pile up (the primary answers at once)."""
    server, sink = serve(upstreams, tmp_path, waits_for)
    with server as r:
        def worker(_: int) -> None:
            for _ in range(4):
                assert timed_post(r, stream=True)[1].status_code == 200

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(worker, range(2)))
        exchanges = sink.wait_for(8, timeout_s=20)
    if waits_for == "all_arms":
        assert overlaps(exchanges, "b") <= most_in_flight
    else:
        assert overlaps(exchanges, "b") >= most_in_flight


def test_all_arms_a_failing_arm_does_not_hold_or_change_the_answer(tmp_path) -> None:
    with FakeUpstream() as a, FakeUpstream(Knobs(status=500)) as b:
        sink = ListSink()
        settings = dev_settings({"a": a.url, "b": b.url}, tmp_path, client_waits_for="all_arms")
        with RouterServer(settings, sink) as r:
            resp = httpx.post(r.url + URL, json=body(True), timeout=20)
            exchange = record(sink, resp)
    assert resp.status_code == 200
    assert resp.text.rstrip().endswith("data: [DONE]")
    assert exchange.arms["a"].ok
    assert exchange.arms["b"].status == 500
