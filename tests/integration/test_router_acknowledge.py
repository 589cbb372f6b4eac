"""``acknowledge: stored`` (the default): the client's final bytes wait for the record's commit.

Real router app on a real socket, real fake upstreams; the sink is the test's, so the test
decides when (and whether) a record is "committed": its ``put`` returns a future the test
resolves. Checked: a stream's events arrive before the commit but its finishing event (its
``finish_reason``) and ``[DONE]`` only after;
a JSON body only after; a record that could not be stored gives the client an error event
without ``[DONE]`` (streamed) or a 500 (not streamed), never the acknowledgement.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import httpx
import pytest
from tests.support.fake_upstream import FakeUpstream, Knobs
from tests.support.router_server import RouterServer, dev_settings

from abserve.model.token_lists import RoutedExchange
from abserve.store.writer import NotStored

pytestmark = pytest.mark.timeout(60)
URL = "/v1/chat/completions"


class GateSink:
    """Records whose commit the test decides: ``put`` returns a pending future."""

    def __init__(self) -> None:
        self.futures: list[Future[None]] = []
        self.arrived = threading.Event()

    def put(self, record: RoutedExchange) -> Future[None]:
        future: Future[None] = Future()
        self.futures.append(future)
        self.arrived.set()
        return future


def body(stream: bool) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4, "temperature": 0, "stream": stream}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RouterServer, GateSink]]:
    with FakeUpstream(Knobs(n_tokens=4)) as a, FakeUpstream(Knobs(n_tokens=4)) as b:
        sink = GateSink()
        settings = dev_settings({"a": a.url, "b": b.url}, tmp_path_factory.mktemp("ack"),
                                client_waits_for="all_arms", acknowledge="stored")
        with RouterServer(settings, sink) as server:
            yield server, sink


@pytest.fixture
def served(router: tuple[RouterServer, GateSink]) -> tuple[RouterServer, GateSink]:
    """The router with no record put yet."""
    router[1].futures.clear()
    router[1].arrived.clear()
    return router


FINISHING = re.compile(rb'"finish_reason":\s*"')  # the event that finishes the answer


def test_the_final_event_and_done_are_sent_only_after_the_commit(
        served: tuple[RouterServer, GateSink]) -> None:
    server, sink = served
    received: list[tuple[float, bytes]] = []

    def read() -> None:
        with httpx.stream("POST", server.url + URL, json=body(True), timeout=20) as resp:
            received.extend((time.monotonic(), chunk) for chunk in resp.iter_raw())

    reader = threading.Thread(target=read)
    reader.start()
    assert sink.arrived.wait(10)
    time.sleep(0.3)  # the client's stream is held, not ended
    committed = time.monotonic()
    sink.futures[0].set_result(None)
    reader.join(10)
    before = b"".join(chunk for t, chunk in received if t < committed)
    after = b"".join(chunk for t, chunk in received if t >= committed)
    assert before.startswith(b"data: {")  # the tokens go out before the commit
    assert not FINISHING.search(before)
    assert b"[DONE]" not in before
    assert FINISHING.search(after)
    assert after.endswith(b"data: [DONE]\n\n")
    assert (before + after).count(b"[DONE]") == 1


def test_a_json_body_waits_for_the_commit(served: tuple[RouterServer, GateSink]) -> None:
    server, sink = served
    got: list[httpx.Response] = []
    client = threading.Thread(target=lambda: got.append(
        httpx.post(server.url + URL, json=body(False), timeout=20)))
    client.start()
    assert sink.arrived.wait(10)
    time.sleep(0.2)
    assert not got  # no answer before the commit
    sink.futures[0].set_result(None)
    client.join(10)
    assert got[0].status_code == 200
    assert got[0].json()["choices"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_record_not_stored_is_never_acknowledged(served: tuple[RouterServer, GateSink],
                                                   stream: bool) -> None:
    server, sink = served

    def refuse() -> None:
        assert sink.arrived.wait(10)
        sink.futures[0].set_exception(NotStored("store commit failed (OperationalError)"))

    refuser = threading.Thread(target=refuse)
    refuser.start()
    resp = httpx.post(server.url + URL, json=body(stream), timeout=20)
    refuser.join(10)
    assert b"[DONE]" not in resp.content
    assert not FINISHING.search(resp.content)  # nor the answer's finishing event
    assert b"could not be stored" in resp.content
    if not stream:
        assert resp.status_code == 500
