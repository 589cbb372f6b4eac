"""A real, configurable OpenAI-compatible streaming upstream for tests and benchmarks.

Router failure tests need upstreams that are real HTTP servers (real sockets, real
chunked streams, real disconnects), not mocked transports. ``FakeUpstream`` serves
``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` and ``/health`` from a
uvicorn server in a background thread (its own event loop) on a free 127.0.0.1 port.
Its answers look like vLLM 0.32's: the same field layout, ``token_ids`` and
``logprobs`` only when asked (``null`` otherwise), a usage-only final chunk only with
``stream_options.include_usage``. Tokens are a deterministic function of the request
(and of ``Knobs.token_offset``), so two upstreams agree unless told not to.

Knobs (a mutable dataclass; set ``upstream.knobs`` between requests):
``first_token_delay_s``, ``token_delay_s``, ``n_tokens``, ``die_after_chunks`` (drop the
connection mid-stream, no terminator), ``status`` (answer with this HTTP status),
``garbage`` (answer 200 with bytes that are not SSE/JSON), ``token_offset`` (shift token
ids to make this upstream disagree), ``raw`` (answer 200 with exactly these bytes, of type
``raw_type``: an error event mid-stream, JSON of the wrong shape...), ``health_status`` (what
``/health`` answers).

Observations: ``requests`` (count), ``bodies`` (parsed JSON of each request),
``active`` (streams in progress), ``cancelled_at`` (monotonic times at which a client
went away mid-stream).

Usage::

    with FakeUpstream(Knobs(n_tokens=8)) as up:
        httpx.post(f"{up.url}/v1/chat/completions", json={...})

``closed_port_url()`` gives a URL on which nothing listens (connection refused).
Run standalone (benchmarks): ``python tests/support/fake_upstream.py --port 8011``.

Pitfalls avoided by using uvicorn rather than ``http.server``: no Nagle delay on the
first streamed chunk (uvicorn sets TCP_NODELAY) and a listen backlog of 2048, not 5.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "fake-model"
VOCAB = ["▁a", "▁b", "▁c", "▁d", "▁e", "▁f", "▁g", "▁h"]


@dataclass
class Knobs:
    """How the fake upstream misbehaves; all default to a fast, healthy server."""

    first_token_delay_s: float = 0.0
    token_delay_s: float = 0.0
    n_tokens: int = 8
    die_after_chunks: int | None = None
    status: int = 200
    garbage: bool = False
    token_offset: int = 0
    raw: bytes | None = None
    raw_type: str = "text/event-stream"
    health_status: int = 200  # what /health answers (vLLM answers 503 once its engine died)


@dataclass
class Observed:
    """What the fake upstream saw."""

    requests: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    active: int = 0
    cancelled_at: list[float] = field(default_factory=list)
    completed: int = 0

    def wait_for_bodies(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The bodies once at least ``count`` arrived: a shadow arm may still be receiving its
        request when the client already has the primary's answer (``client_waits_for: primary``)."""
        deadline = time.monotonic() + timeout_s
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.bodies) >= count, f"{len(self.bodies)} bodies after {timeout_s} s, expected {count}"
        return self.bodies


def _token_ids(body: dict[str, Any], knobs: Knobs) -> list[int]:
    seed = hashlib.sha256(orjson.dumps(body.get("messages") or body.get("prompt"))).digest()
    return [(seed[i % 32] + i + knobs.token_offset) % 1000 for i in range(knobs.n_tokens)]


def _piece(tid: int) -> str:
    return VOCAB[tid % len(VOCAB)]


def _chat_logprobs(tid: int, k: int) -> dict[str, Any]:
    top = [{"token": _piece(tid + j), "logprob": -0.1 * (j + 1), "bytes": None} for j in range(k)]
    return {"content": [{"token": _piece(tid), "logprob": -0.1, "bytes": None, "top_logprobs": top}]}


def _completion_logprobs(tid: int, k: int, offset: int) -> dict[str, Any]:
    top = {_piece(tid + j): -0.1 * (j + 1) for j in range(k)}
    return {
        "text_offset": [offset],
        "token_logprobs": [-0.1],
        "tokens": [_piece(tid)],
        "top_logprobs": [top],
    }


class _Answer:
    """Builds vLLM-shaped chunks and bodies for one request."""

    def __init__(self, body: dict[str, Any], chat: bool, knobs: Knobs) -> None:
        self.body, self.chat, self.knobs = body, chat, knobs
        self.ids = _token_ids(body, knobs)
        self.rid = ("chatcmpl-" if chat else "cmpl-") + hashlib.md5(
            str(time.monotonic_ns()).encode()
        ).hexdigest()[:16]
        self.want_ids = bool(body.get("return_token_ids"))
        lp = body.get("logprobs")
        self.k: int | None
        if chat:
            self.k = int(body.get("top_logprobs") or 0) if lp else None
        else:
            self.k = int(lp) if lp is not None else None

    def _head(self) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.rid, "object": obj, "created": int(time.time()), "model": MODEL}

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": 5,
            "total_tokens": 5 + len(self.ids),
            "completion_tokens": len(self.ids),
        }

    def chunks(self) -> list[bytes]:
        out: list[dict[str, Any]] = []
        if self.chat:
            first = {
                **self._head(),
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "prompt_token_ids": [1, 2, 3, 4, 5] if self.want_ids else None,
            }
            out.append(first)
        for i, tid in enumerate(self.ids):
            last = i == len(self.ids) - 1
            choice: dict[str, Any] = {"index": 0}
            if self.chat:
                choice["delta"] = {"content": _piece(tid)}
                choice["logprobs"] = _chat_logprobs(tid, self.k) if self.k is not None else None
            else:
                choice["text"] = _piece(tid)
                choice["logprobs"] = _completion_logprobs(tid, self.k, 2 * i) if self.k is not None else None
            choice["finish_reason"] = "length" if last else None
            choice["stop_reason"] = None
            if not self.chat:
                choice["prompt_token_ids"] = [1, 2, 3, 4, 5] if self.want_ids and i == 0 else None
            choice["token_ids"] = [tid] if self.want_ids else None
            out.append({**self._head(), "choices": [choice]})
        if (self.body.get("stream_options") or {}).get("include_usage"):
            out.append({**self._head(), "choices": [], "usage": self.usage()})
        return [b"data: " + orjson.dumps(c) + b"\n\n" for c in out]

    def full(self) -> dict[str, Any]:
        text = "".join(_piece(t) for t in self.ids)
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
            choice["logprobs"] = (
                {"content": [_chat_logprobs(t, self.k)["content"][0] for t in self.ids]}
                if self.k is not None
                else None
            )
        else:
            choice["text"] = text
            choice["logprobs"] = None
        choice.update(finish_reason="length", stop_reason=None, token_ids=self.ids if self.want_ids else None)
        obj = "chat.completion" if self.chat else "text_completion"
        return {
            **self._head(),
            "object": obj,
            "choices": [choice],
            "usage": self.usage(),
            "prompt_token_ids": [1, 2, 3, 4, 5] if self.want_ids else None,
        }


class FakeUpstream:
    """A real HTTP server in a thread, answering like a (tiny, scriptable) vLLM."""

    def __init__(self, knobs: Knobs | None = None, port: int = 0) -> None:
        self.knobs = knobs or Knobs()
        self.observed = Observed()
        self._port = port or free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def app(self) -> Starlette:
        routes = [
            Route("/v1/chat/completions", self._complete, methods=["POST"]),
            Route("/v1/completions", self._complete, methods=["POST"]),
            Route("/v1/models", self._models),
            Route("/health", self._health),
        ]
        return Starlette(routes=routes)

    async def _health(self, request: Request) -> Response:
        return Response(b"", status_code=self.knobs.health_status)

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm"}]}
        )

    async def _complete(self, request: Request) -> Response:
        knobs = self.knobs
        body = orjson.loads(await request.body())
        self.observed.requests += 1
        self.observed.bodies.append(body)
        if knobs.status != 200:
            err = {
                "error": {
                    "message": "fake upstream error",
                    "type": "BadRequestError",
                    "param": None,
                    "code": knobs.status,
                }
            }
            return JSONResponse(err, status_code=knobs.status)
        if knobs.garbage:
            return Response(b"<html>not json</html>\n", media_type="text/event-stream")
        if knobs.raw is not None:
            return Response(knobs.raw, media_type=knobs.raw_type)
        answer = _Answer(body, request.url.path.endswith("chat/completions"), knobs)
        if not body.get("stream"):
            await asyncio.sleep(knobs.first_token_delay_s + knobs.token_delay_s * len(answer.ids))
            return Response(orjson.dumps(answer.full()), media_type="application/json")
        return StreamingResponse(self._stream(answer, knobs), media_type="text/event-stream")

    async def _stream(self, answer: _Answer, knobs: Knobs) -> AsyncIterator[bytes]:
        self.observed.active += 1
        finished = False
        try:
            await asyncio.sleep(knobs.first_token_delay_s)
            for n, chunk in enumerate(answer.chunks()):
                if knobs.die_after_chunks is not None and n >= knobs.die_after_chunks:
                    raise ConnectionAbortedError("fake upstream dies mid-stream (knob)")
                if n and knobs.token_delay_s:
                    await asyncio.sleep(knobs.token_delay_s)
                yield chunk
            yield b"data: [DONE]\n\n"
            finished = True
            self.observed.completed += 1
        finally:
            self.observed.active -= 1
            if not finished and knobs.die_after_chunks is None:
                self.observed.cancelled_at.append(time.monotonic())

    def start(self) -> FakeUpstream:
        config = uvicorn.Config(
            self.app(),
            host="127.0.0.1",
            port=self._port,
            log_level="critical",
            lifespan="off",
            backlog=2048,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake upstream did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port_url() -> str:
    """A URL on which nothing listens: connecting is refused."""
    return f"http://127.0.0.1:{free_port()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="listen address (a namespaced host's)")
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--token-delay-s", type=float, default=0.0)
    args = parser.parse_args()
    up = FakeUpstream(Knobs(n_tokens=args.tokens, token_delay_s=args.token_delay_s), args.port)
    config = uvicorn.Config(
        up.app(),
        host=args.host,
        port=args.port,
        log_level="warning",
        lifespan="off",
        backlog=2048,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
