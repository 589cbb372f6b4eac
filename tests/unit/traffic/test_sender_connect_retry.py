"""A request that reached nobody is sent again (the router restarting), within a bound; so is
the load's model-name lookup at the start of a profile.

Real sockets on loopback: a port with nothing behind it until a server starts listening on
it a moment later (the router coming back), and a port that never answers.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from tests.support.fake_upstream import free_port

from abserve.traffic.corpus import CorpusEntry
from abserve.traffic.run_state import discover_model
from abserve.traffic.sender import SendOptions, make_pool, send_entry

ANSWER = json.dumps({"choices": [{"finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


class _Chat(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.server.posts += 1  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def do_GET(self) -> None:  # /v1/models
        body = json.dumps({"data": [{"id": "tiny-llava"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


@contextmanager
def _server_after(port: int, delay_s: float) -> Iterator[list[http.server.HTTPServer]]:
    """A chat endpoint on ``port`` that starts listening ``delay_s`` from now."""
    started: list[http.server.HTTPServer] = []

    def serve() -> None:
        time.sleep(delay_s)
        server = http.server.HTTPServer(("127.0.0.1", port), _Chat)
        server.posts = 0  # type: ignore[attr-defined]
        started.append(server)
        server.serve_forever(poll_interval=0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield started
    finally:
        if started:
            started[0].shutdown()
            started[0].server_close()


def _entry() -> CorpusEntry:
    return CorpusEntry(7, b"{}", {"x-abserve-profile": "p", "x-abserve-items": "1"}, 1, 0, (), 10)


def _send(port: int, retry_s: float) -> tuple[float, object]:
    t0 = time.monotonic()
    opts = SendOptions(run_id="r", profile="p", worker="w", timeout_s=5.0, connect_retry_s=retry_s)
    record = send_entry(make_pool(1), f"http://127.0.0.1:{port}", _entry(), opts,
                        scheduled_at=time.perf_counter())
    return time.monotonic() - t0, record


@pytest.mark.server
def test_a_request_is_sent_again_once_the_router_listens() -> None:
    port = free_port()
    with _server_after(port, 1.0) as started:
        took, record = _send(port, retry_s=20.0)
    assert record.error is None, record  # type: ignore[attr-defined]
    assert record.status == 200  # type: ignore[attr-defined]
    assert started[0].posts == 1  # type: ignore[attr-defined]  # sent once it could be, once
    assert 0.9 < took < 10.0
    assert record.lateness_s >= 0.9  # type: ignore[attr-defined]  # the wait shows as lateness


def test_a_router_that_never_comes_back_is_a_connect_error_within_the_bound() -> None:
    took, record = _send(free_port(), retry_s=1.5)
    assert record.error == "connect"  # type: ignore[attr-defined]
    assert 0.7 < took < 4.0


@pytest.mark.server
def test_the_model_lookup_waits_for_a_router_coming_back() -> None:
    port = free_port()
    with _server_after(port, 1.0):
        assert discover_model(f"http://127.0.0.1:{port}", connect_retry_s=20.0) == "tiny-llava"
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="pass --model"):
        discover_model(f"http://127.0.0.1:{free_port()}", connect_retry_s=1.5)
    assert time.monotonic() - t0 < 5.0
