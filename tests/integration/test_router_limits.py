"""A client's connection is bounded before its request reaches the fan-out (issue 15, item
8), on the real router app under uvicorn with real sockets: an oversized request head is a
431 and a closed connection, a head that never completes (slowloris, or no byte at all) is
closed after ``header_timeout_s``, and a stalled body holds an admission slot (counted
against ``max_concurrency``) only until ``body_timeout_s`` (408, connection closed), or, once
it falls below ``min_body_bytes_per_s`` over a ``body_rate_window_s`` window, at once (issue
52: a big body that stops arriving no longer holds its memory and slot for the whole timeout)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.fake_upstream import FakeUpstream
from tests.support.router_server import RouterServer, dev_settings

pytestmark = pytest.mark.timeout(60)
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
BODY = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterServer]:
    with FakeUpstream() as a, FakeUpstream() as b, RouterServer(dev_settings(
            {"a": a.url, "b": b.url}, tmp_path, max_header_bytes=16 * 1024, header_timeout_s=1.5,
            body_timeout_s=1.5, max_concurrency=1)) as r:
        yield r


def connect(router: RouterServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", router.port), timeout=10)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the router sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_an_oversized_head_is_431_and_the_connection_closed(router: RouterServer) -> None:
    with connect(router) as sock:
        sock.sendall(HEAD + b"X-Big: " + b"a" * 20000)  # over 16 KiB, never ended
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert b"request head exceeds 16384 bytes" in answer


def test_a_huge_head_is_cut_off_early(router: RouterServer) -> None:
    sent = 0
    with connect(router) as sock, pytest.raises((BrokenPipeError, ConnectionResetError)):
        sock.sendall(HEAD + b"X-Big: ")
        while sent < 64 << 20:  # 64 MiB of a header value that never ends
            sock.sendall(b"a" * 65536)
            sent += 65536
    assert sent < 4 << 20  # the router stopped reading (and closed) long before


@pytest.mark.parametrize("trickle", [True, False])
def test_a_head_that_never_completes_is_closed_after_header_timeout(router: RouterServer,
                                                                   trickle: bool) -> None:
    with connect(router) as sock:
        started = time.monotonic()
        sock.sendall(HEAD if trickle else b"")
        sock.settimeout(0.3)
        answer = b""
        while time.monotonic() - started < 10:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if trickle:
                    sock.sendall(b"X-Slow: 1\r\n")  # a header line now and then: slowloris
                continue
            if not chunk:
                break
            answer += chunk
        took = time.monotonic() - started
    assert 1.4 < took < 4, took  # header_timeout_s = 1.5
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"not received within 1.5 s" in answer


def test_a_stalled_body_holds_a_slot_until_body_timeout(router: RouterServer) -> None:
    url = f"{router.url}/v1/chat/completions"
    with connect(router) as sock:
        sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])  # then stalls
        time.sleep(0.3)
        busy = httpx.post(url, content=BODY, headers={"content-type": "application/json"})
        started = time.monotonic()
        answer = read_until_closed(sock)
        took = time.monotonic() - started
    after = httpx.post(url, content=BODY, headers={"content-type": "application/json"})
    assert busy.status_code == 503  # the stalled body counts against max_concurrency (1)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request body not received within 1.5 s" in answer
    assert took < 3, took
    assert after.status_code == 200


def test_a_big_body_that_stops_arriving_is_408_at_the_rate_floor(tmp_path: Path) -> None:
    with FakeUpstream() as a, FakeUpstream() as b, RouterServer(dev_settings(
            {"a": a.url, "b": b.url}, tmp_path, body_timeout_s=30, max_concurrency=1,
            min_body_bytes_per_s=64 * 1024, body_rate_window_s=0.5)) as router, connect(router) as sock:
        sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % (8 << 20) + b"x" * (4 << 20))
        started = time.monotonic()  # 4 of its 8 MiB sent, then nothing
        answer = read_until_closed(sock)
        took = time.monotonic() - started
        after = httpx.post(f"{router.url}/v1/chat/completions", content=BODY,
                           headers={"content-type": "application/json"})
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    assert b"request body arrived slower than 65536 bytes/s over 0.5 s" in answer
    assert took < 3, took  # within two windows of the stall, not the 30 s body timeout
    assert after.status_code == 200  # its admission slot (max_concurrency 1) was released


def test_requests_within_the_limits_share_a_keep_alive_connection(router: RouterServer) -> None:
    with httpx.Client(base_url=router.url) as client:
        answers = [client.post("/v1/chat/completions", content=BODY,
                               headers={"content-type": "application/json",
                                        "x-padding": "p" * 8000}) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
