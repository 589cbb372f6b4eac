"""A load client light enough not to be what a router benchmark measures.

httpx spends 1.2-1.5 ms of CPU per streamed 1 MB request (``/work/shared`` proxy notes):
on a 2-core machine that is CPU taken from the router under test. This client is a bare
asyncio protocol on uvloop: each connection sends one precomputed request (head and body
written as they are, no encoding per request) and reads the streamed answer without
parsing it beyond what timing needs: the end of the response head, the first body bytes
after it (time to first token, as the benchmarks define it) and the chunked terminator
(end to end). Keep-alive; one request at a time per connection.

``LightClient(host, port, path, body)``: ``await client.one()`` → ``(ttft_s, e2e_s)``.
A non-200 status or a stream that does not end with ``data: [DONE]`` raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import time

END = b"0\r\n\r\n"
DONE = b"data: [DONE]\n\n"


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.done: asyncio.Future[tuple[float, float]] | None = None
        self.lost = False
        self._reset(0.0)

    def _reset(self, t0: float) -> None:
        self.t0, self.ttft, self.head_end = t0, 0.0, -1
        self.buf = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(RuntimeError("connection lost mid-answer"))

    def send(self, request: bytes) -> asyncio.Future[tuple[float, float]]:
        assert self.transport is not None
        self._reset(time.perf_counter())
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buf += data
        if self.head_end < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head_end = end + 4
            if not self.buf.startswith(b"HTTP/1.1 200"):
                self._fail(f"status {bytes(self.buf[9:12]).decode(errors='replace')}")
                return
        if not self.ttft and len(self.buf) > self.head_end:
            self.ttft = now - self.t0
        if self.buf.endswith(END):
            if DONE not in self.buf[-64:]:
                self._fail("stream did not end with [DONE]")
                return
            if self.done is not None and not self.done.done():
                self.done.set_result((self.ttft, now - self.t0))

    def _fail(self, why: str) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(RuntimeError(why))


class LightClient:
    """A pool of keep-alive connections sending one precomputed streamed request."""

    def __init__(self, host: str, port: int, path: str, body: bytes) -> None:
        self.host, self.port = host, port
        self.request = (f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n"
                        "content-type: application/json\r\n"
                        f"content-length: {len(body)}\r\n\r\n").encode() + body
        self._idle: list[_Conn] = []

    async def one(self) -> tuple[float, float]:
        conn = self._reusable()
        if conn is not None:
            try:
                return await self._send(conn)
            except RuntimeError:  # the server closed an idle connection (keep-alive expiry)
                if conn.buf:
                    raise  # it had started answering: a real failure
        return await self._send(await self._connect())

    async def _send(self, conn: _Conn) -> tuple[float, float]:
        result = await conn.send(self.request)
        if not conn.lost:
            self._idle.append(conn)
        return result

    def _reusable(self) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port)
        return conn

    def close(self) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()
