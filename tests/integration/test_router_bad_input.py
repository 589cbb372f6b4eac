"""Bad input and security at the router's door: refused early, no arm called, nothing leaked."""

from __future__ import annotations

import base64
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.fake_upstream import FakeUpstream
from tests.support.router_server import ListSink, RouterServer, dev_settings

pytestmark = pytest.mark.timeout(60)

KEY = "test-key-0123456789abcdef"
LIMIT = 1024 * 1024
SECRET_TEXT = "zebra-quokka-prompt-words"
IMAGE_B64 = base64.b64encode(b"pixels-" * 200).decode()


def body(n_images: int = 1, url: str | None = None, **extra: Any) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": SECRET_TEXT}]
    parts += [{"type": "image_url",
               "image_url": {"url": url or f"data:image/png;base64,{IMAGE_B64}"}}] * n_images
    return {"model": "fake-model", "messages": [{"role": "user", "content": parts}],
            "max_tokens": 4, "stream": True, **extra}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[tuple[RouterServer, FakeUpstream, FakeUpstream]]:
    tmp: Path = tmp_path_factory.mktemp("router")
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url}, tmp, dev_mode=False, api_key=KEY,
                                max_body_bytes=LIMIT, max_images=3,
                                allowed_media_hosts=["localhost", "8.8.8.8"])
        with RouterServer(settings, ListSink()) as router:
            yield router, a, b


AUTH = {"authorization": f"Bearer {KEY}"}


def post(router: RouterServer, content: bytes | None = None, json: Any = None,
         headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{router.url}/v1/chat/completions", content=content, json=json,
                      headers={**AUTH, **(headers or {})}, timeout=10)


def calls(a: FakeUpstream, b: FakeUpstream) -> int:
    return a.observed.requests + b.observed.requests


def assert_openai_error(resp: httpx.Response, status: int) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'{"model": "x",'])
def test_malformed_json_is_400_and_no_arm_is_called(setup, raw: bytes) -> None:
    router, a, b = setup
    before = calls(a, b)
    assert_openai_error(post(router, content=raw), 400)
    assert calls(a, b) == before


@pytest.mark.parametrize("bad", [{"model": "m"}, {"model": "m", "messages": []},
                                 {"model": 3, "messages": [{"role": "user", "content": "x"}]},
                                 {"model": "m", "messages": [{"content": "no role"}]},
                                 {"model": "m", "messages": [{"role": "user", "content": [
                                     {"type": "image_embeds", "image_embeds": "AAAA"}]}]}])
def test_schema_invalid_is_400_before_fan_out(setup, bad: dict[str, Any]) -> None:
    router, a, b = setup
    before = calls(a, b)
    assert_openai_error(post(router, json=bad), 400)
    assert calls(a, b) == before


def _raw_request(router: RouterServer, head: bytes, chunks: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", router.port), timeout=5) as s:
        s.sendall(head)
        for chunk in chunks:
            s.sendall(chunk)
        return s.recv(65536)  # the answer arrives although the body never ended


def test_oversize_body_with_content_length_is_413_without_reading_it(setup) -> None:
    router, _a, _b = setup
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\n"
            f"content-type: application/json\r\ncontent-length: {LIMIT * 20}\r\n\r\n").encode()
    answer = _raw_request(router, head, [b"{" + b" " * 1000])
    assert answer.startswith(b"HTTP/1.1 413")


def test_oversize_chunked_body_is_413_as_soon_as_the_cap_is_passed(setup) -> None:
    router, a, b = setup
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\n"
            "content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n").encode()
    piece = b" " * 65536
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    answer = _raw_request(router, head, [chunk] * (LIMIT // len(piece) + 1))  # no final 0-chunk
    assert answer.startswith(b"HTTP/1.1 413")
    before = calls(a, b)
    big = {**body(), "pad": "x" * (LIMIT + 10)}
    resp = httpx.post(f"{router.url}/v1/chat/completions", headers=AUTH, timeout=10,
                      content=iter([httpx.Request("POST", "/", json=big).content]))
    assert_openai_error(resp, 413)
    assert calls(a, b) == before


def test_too_many_images_is_400(setup) -> None:
    router, a, b = setup
    before = calls(a, b)
    assert_openai_error(post(router, json=body(n_images=4)), 400)
    assert calls(a, b) == before
    assert post(router, json=body(n_images=3)).status_code == 200


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://localhost/x.png",
                                 "http://2130706433/x.png", "http://[::ffff:127.0.0.1]/x.png",
                                 "http://169.254.169.254/", "https://not-allowed.example/x.png"])
def test_media_urls_other_than_data_are_refused(setup, url: str) -> None:
    router, a, b = setup
    before = calls(a, b)
    assert_openai_error(post(router, json=body(url=url)), 400)
    assert calls(a, b) == before


def test_allowlisted_public_host_passes(setup) -> None:
    router, _a, _b = setup
    assert post(router, json=body(url="http://8.8.8.8/cat.png")).status_code == 200


@pytest.mark.parametrize("auth", [None, "Bearer wrong-key-0123456789", f"Basic {KEY}", KEY])
def test_api_key_is_required(setup, auth: str | None) -> None:
    router, _a, _b = setup
    headers = {"authorization": auth} if auth else {}
    resp = httpx.post(f"{router.url}/v1/chat/completions", json=body(), headers=headers)
    assert_openai_error(resp, 401)
    assert httpx.get(f"{router.url}/metrics", headers=headers).status_code == 401
    assert httpx.get(f"{router.url}/v1/models", headers=headers).status_code == 401
    assert httpx.get(f"{router.url}/livez").status_code == 200


@pytest.mark.parametrize("path", ["/tokenize", "/pause", "/v1/embeddings", "/health",
                                  "/docs", "/openapi.json", "/v1/chat/completions/../../pause"])
def test_only_listed_paths_are_served(setup, path: str) -> None:
    router, a, b = setup
    before = calls(a, b)
    resp = httpx.post(f"{router.url}{path}", json={}, headers=AUTH)
    assert resp.status_code in (404, 405)
    assert httpx.get(f"{router.url}{path}", headers=AUTH).status_code in (404, 405)
    assert calls(a, b) == before


def test_no_key_prompt_or_image_reaches_a_log_line(setup, caplog) -> None:
    router, a, _b = setup
    caplog.set_level(logging.DEBUG)
    post(router, json=body())
    post(router, content=b'{"bad json ' + SECRET_TEXT.encode())
    post(router, json=body(url="file:///" + SECRET_TEXT))
    post(router, json=body(n_images=9))
    httpx.post(f"{router.url}/v1/chat/completions", json=body(),
               headers={"authorization": f"Bearer {SECRET_TEXT}"})
    a.knobs.status = 500
    post(router, json=body())
    a.knobs.status = 200
    # the router runs in its own thread; the test's own client logs from the main thread
    router_records = [r for r in caplog.records if r.threadName != "MainThread"]
    assert any(r.name == "abserve.router" for r in router_records), "the router logs"
    text = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in router_records)
    for secret in (KEY, SECRET_TEXT, IMAGE_B64[:40], "authorization", "Bearer"):
        assert secret not in text
