"""The router's HTTP client for one arm: a keep-alive pool of ``http1.Connection``s.

Why its own client: the router sends every ~1 MB request to every arm and reads every
arm's stream, so the client's CPU per request is paid once per arm. Measured on the
developers' 2-core machine (streamed 1 MB chat requests to a local upstream, client CPU
only): httpx 1.2-1.5 ms per request, aiohttp 0.3-0.7 ms, and aiohttp was still a fifth of
the router's CPU (``benchmarks/router_overhead.md``). ``http1.Connection`` is an asyncio
protocol around httptools' parser that writes the request head and body as they are and
hands the answer's bytes over as they arrive.

``ArmClient`` is owned by the app's lifespan (one per arm). Its pool is ``PoolLimits``: at
most ``max_connections`` requests in flight (more wait for a free one), idle connections
reused until ``keepalive_expiry_s`` (under the upstream's own 5 s, so a reused connection
is never one the server is closing). Its connect timeout (which also covers waiting for a
free connection) is the arm's ``connect_s``; read deadlines are per phase and enforced by
the caller (``fanout.ArmCall``). Bytes are relayed as the arm sent them: no
``Accept-Encoding`` is offered and nothing is decompressed.

Transport failures surface as ``http1.ArmTransportError`` from ``open`` (streaming; the
caller classifies them with ``error_class``) or as ``UpstreamError`` from ``post`` and
``get`` (whole answers).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

from abserve.model.records import ErrorClass
from abserve.router.http1 import ArmTransportError, Body, ConnectFailed, Connection
from abserve.router.settings import ArmSettings, PoolLimits

USER_AGENT = "abserve-router"


@dataclass(frozen=True)
class Answer:
    """A whole (non-streamed) answer of an arm."""

    status_code: int
    content: bytes
    content_type: str


class UpstreamError(Exception):
    """The arm could not be reached, or broke the connection before answering in full."""


def error_class(exc: ArmTransportError, answered: bool) -> ErrorClass:
    """``connect`` when no answer began (refused, connect timeout, dropped before the
    head), else ``truncated`` (the answer broke off)."""
    if isinstance(exc, ConnectFailed):
        return "connect"
    return "truncated" if answered else "connect"


class Response:
    """An arm's answer with its body unread: ``status``, ``headers`` (lower-case names)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.status, self.headers = conn.status, conn.headers

    async def iter_any(self) -> AsyncIterator[bytes]:
        """The body as it arrives, all bytes read so far in one piece."""
        while (data := await self._conn.read_some()) is not None:
            yield data

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([data async for data in self.iter_any()])


class ArmClient:
    """One arm's pooled HTTP client; use as an async context manager."""

    def __init__(self, arm: ArmSettings, pool: PoolLimits) -> None:
        self.arm, self.pool = arm, pool
        url = urlsplit(arm.url)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._tls = ssl.create_default_context() if url.scheme == "https" else None
        self._prefix = url.path.rstrip("/")
        netloc = url.netloc.rpartition("@")[2]  # never a userinfo in the Host header
        extra = f"authorization: Bearer {arm.api_key.get_secret_value()}\r\n" if arm.api_key else ""
        self._fixed = f"host: {netloc}\r\nuser-agent: {USER_AGENT}\r\n{extra}".encode("latin-1")
        self._idle: list[Connection] = []
        self._slots = asyncio.Semaphore(pool.max_connections)
        self._open = False

    async def __aenter__(self) -> ArmClient:
        self._open = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self._open = False
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def _head(self, method: str, path: str, body: Body | None, extra: bytes = b"") -> bytes:
        length = (b"content-type: application/json\r\ncontent-length: %d\r\n"
                  % sum(map(len, body)) if body is not None else b"")
        return b"%s %s HTTP/1.1\r\n%s%s%s\r\n" % (method.encode(), (self._prefix + path).encode(),
                                                  self._fixed, extra, length)

    async def _acquire(self) -> Connection:
        """A connection for one request: a fresh idle one, else a new one; waiting for a
        free slot and connecting together within the arm's connect timeout."""
        if not self._open:
            raise RuntimeError("ArmClient used outside its 'async with' block")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.arm.deadlines.connect_s):
                await self._slots.acquire()
                try:
                    return self._reuse(loop.time()) or await self._connect(loop)
                except BaseException:
                    self._slots.release()
                    raise
        except TimeoutError:
            raise ConnectFailed("connect timeout") from None
        except OSError as exc:
            raise ConnectFailed(type(exc).__name__) from exc

    def _reuse(self, now: float) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self.pool.keepalive_expiry_s:
                return conn
            conn.close()
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> Connection:
        _, conn = await loop.create_connection(
            Connection, self._host, self._port, ssl=self._tls,
            server_hostname=self._host if self._tls else None)
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _release(self, conn: Connection) -> None:
        self._slots.release()
        if self._open and conn.reusable:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.append(conn)
        else:
            conn.close()

    @asynccontextmanager
    async def open(self, method: str, path: str, payload: bytes | Body | None = None,
                   headers: bytes = b"") -> AsyncIterator[Response]:
        """Send a request (``payload``: JSON bytes, whole or in pieces written one after
        another; ``headers``: header lines added to the head, ``affinity.header_bytes``) and
        yield the response with its body unread; a connection whose answer was not read to
        its end is closed."""
        body = (payload,) if isinstance(payload, bytes) else payload
        conn = await self._acquire()
        try:
            conn.send(self._head(method, path, body, headers), body or ())
            await conn.wait_head()
            yield Response(conn)
        finally:
            self._release(conn)

    async def post(self, path: str, payload: bytes, timeout_s: float | None = None,
                   headers: bytes = b"") -> Answer:
        """POST ``payload`` (JSON bytes; ``headers``: as for ``open``) and read the whole answer."""
        return await self._whole("POST", path, payload, timeout_s, headers)

    async def get(self, path: str, timeout_s: float | None = None) -> Answer:
        """GET ``path`` and read the whole answer."""
        return await self._whole("GET", path, None, timeout_s)

    async def _whole(self, method: str, path: str, payload: bytes | None,
                     timeout_s: float | None, headers: bytes = b"") -> Answer:
        try:
            async with asyncio.timeout(timeout_s), self.open(method, path, payload,
                                                             headers) as response:
                content = await response.read()
                ctype = response.headers.get("content-type", "application/json")
                return Answer(response.status, content, ctype)
        except ArmTransportError as exc:
            raise UpstreamError(str(exc) or type(exc).__name__) from exc
