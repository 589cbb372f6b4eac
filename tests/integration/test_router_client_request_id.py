"""Issue 18 item 5: the client's own request id (``X-Request-ID``) is recorded beside the
router's, through the real router app, real local upstreams and the real store, so an
exchange can be found from a line of the client's log. A value that could break a record
or mislead a reader (too long, not printable ASCII, empty) is never stored or echoed; the
record says why it was dropped. A client cannot set the tag through ``x-abserve-*``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.test_router_hardening import find_record
from tests.support.fake_upstream import FakeUpstream
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.model.records import REQUEST_ID_HEADER
from abserve.router.app import MAX_CLIENT_ID_LEN
from abserve.store import Store

pytestmark = pytest.mark.timeout(60)

KEY = "client-request-id-key-0123"
URL = "/v1/chat/completions"
TAG, REFUSED = "client_request_id", "client_request_id_refused"


def body(stream: bool = False) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4, "temperature": 0, "stream": stream}


@pytest.fixture(scope="module")
def routed(tmp_path_factory) -> Iterator[tuple[RouterServer, ListSink]]:
    tmp: Path = tmp_path_factory.mktemp("client-id")
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url}, tmp, dev_mode=False, api_key=KEY,
                                seeded_sampling="refuse")
        sink = ListSink()
        with RouterServer(settings, sink) as router:
            yield router, sink


def post(router: RouterServer, headers: dict[str, str] | list[tuple[str, bytes]],
         stream: bool = False) -> httpx.Response:
    # raw (name, bytes) pairs reach the socket as they are: httpx would refuse non-ASCII str
    pairs = [(k.encode(), v.encode() if isinstance(v, str) else v)
             for k, v in (headers.items() if isinstance(headers, dict) else headers)]
    pairs.append((b"authorization", f"Bearer {KEY}".encode()))
    resp = httpx.post(router.url + URL, json=body(stream), headers=pairs, timeout=20)
    assert resp.status_code == 200, resp.text
    return resp


def record_of(routed, resp: httpx.Response) -> Any:
    return find_record(routed[1], resp.headers[REQUEST_ID_HEADER])


@pytest.mark.parametrize("stream", [False, True])
def test_client_request_id_is_recorded_beside_the_routers_and_echoed(routed, stream) -> None:
    client_id = f"bench-1f3a9c2e-{int(stream)}"
    resp = post(routed[0], {"X-Request-ID": client_id}, stream=stream)
    exchange = record_of(routed, resp)
    assert exchange.tags[TAG] == client_id
    assert exchange.request_id == resp.headers[REQUEST_ID_HEADER] != client_id
    assert resp.headers["x-request-id"] == client_id
    assert REFUSED not in exchange.tags


def test_no_client_request_id_no_tag(routed) -> None:
    resp = post(routed[0], {})
    exchange = record_of(routed, resp)
    assert TAG not in exchange.tags
    assert REFUSED not in exchange.tags
    assert "x-request-id" not in resp.headers


def test_longest_id_and_inner_spaces_are_kept_whole(routed) -> None:
    longest = "r" * MAX_CLIENT_ID_LEN
    assert record_of(routed, post(routed[0], {"X-Request-ID": longest})).tags[TAG] == longest
    spaced = post(routed[0], {"X-Request-ID": "id with inner space"})
    assert record_of(routed, spaced).tags[TAG] == "id with inner space"


@pytest.mark.parametrize(("value", "why"), [
    (b"r" * (MAX_CLIENT_ID_LEN + 1), "longer than"),
    (b"caf\xc3\xa9-42", "not printable ASCII"),  # UTF-8 bytes arrive as latin-1 text
    (b"a\tb", "not printable ASCII"),
    (b"", "empty"),
])
def test_unusable_ids_are_dropped_with_the_reason(routed, value, why) -> None:
    resp = post(routed[0], [("X-Request-ID", value)])
    exchange = record_of(routed, resp)
    assert TAG not in exchange.tags
    assert why in exchange.tags[REFUSED]
    assert "x-request-id" not in resp.headers


def test_the_tag_cannot_be_set_through_abserve_tag_headers(routed) -> None:
    resp = post(routed[0], {"x-abserve-client_request_id": "forged",
                            "x-abserve-client_request_id_refused": "forged",
                            "x-abserve-profile": "mine"})
    tags = record_of(routed, resp).tags
    assert tags == {"profile": "mine"}
    real = post(routed[0], {"x-abserve-client_request_id": "forged", "X-Request-ID": "real-1"})
    assert record_of(routed, real).tags[TAG] == "real-1"


def test_client_request_id_survives_the_real_store(tmp_path) -> None:
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url}, tmp_path)
        with RouterServer(settings) as router:
            ids = {}
            for i in range(3):
                resp = httpx.post(router.url + URL, json=body(stream=bool(i % 2)),
                                  headers={"X-Request-ID": f"client-{i}"}, timeout=20)
                assert resp.status_code == 200
                ids[resp.headers[REQUEST_ID_HEADER]] = f"client-{i}"
    store = Store.open(settings.effective_database_url)
    stored = {x.request_id: x.tags.get(TAG) for x in store.iter_exchanges("test-run")}
    assert stored == ids
