"""The router's HTTP client for one arm: a pooled aiohttp session with explicit limits.

Why aiohttp and not httpx: the router sends every ~1 MB request to every arm and reads
every arm's stream, so the client's CPU per request is paid once per arm. Measured on the
developers' 2-core machine (streamed 1 MB chat requests to a local upstream, client CPU
only): httpx 1.2-1.5 ms per request, aiohttp 0.3-0.7 ms; httpx's pool bookkeeping also
grows with the pool's size (``benchmarks/router_overhead.md``, proxy-overhead notes).

``ArmClient`` is owned by the app's lifespan (one per arm). Its pool is ``PoolLimits``
(connection cap, keep-alive expiry under the upstream's own 5 s so a reused connection
is never one the server is closing); its connect timeout (which also covers waiting for
a free pooled connection) is the arm's ``connect_s``; read deadlines are per phase and
enforced by the caller (``fanout.ArmCall``). Bytes are relayed as the arm sent them: no
``Accept-Encoding`` is offered and nothing is decompressed.

One copy less per arm: aiohttp joins a request's head and body into one new buffer before
writing (``SKIP_WRITELINES``, on Python before 3.12.9, whose selector transports had a
``writelines`` bug); the router runs on uvloop, whose own ``writelines`` does not have it,
so ``zero_copy_writes`` lets aiohttp hand the head and the ~1 MB body to the transport as
they are (measured: ~0.1 ms CPU per arm per 1 MB request).

Transport failures surface as ``aiohttp.ClientError`` from ``open`` (streaming; the
caller classifies them with ``error_class``) or as ``UpstreamError`` from ``post`` and
``get`` (whole answers).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType

import aiohttp
import aiohttp.http_writer
from yarl import URL

from abserve.records import ErrorClass
from abserve.router.settings import ArmSettings, PoolLimits

JSON_HEADERS = {"content-type": "application/json"}


@dataclass(frozen=True)
class Answer:
    """A whole (non-streamed) answer of an arm."""

    status_code: int
    content: bytes
    content_type: str


class UpstreamError(Exception):
    """The arm could not be reached, or broke the connection before answering in full."""


def error_class(exc: aiohttp.ClientError, answered: bool) -> ErrorClass:
    """``connect`` when no answer began (refused, connect timeout, dropped before the
    head), else ``truncated`` (the answer broke off)."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return "connect"
    return "truncated" if answered else "connect"


def zero_copy_writes() -> bool:
    """Let aiohttp write head and body without joining them, when the running loop is
    uvloop's (see the module docstring); True when enabled."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is in the service extra
        return False
    if isinstance(asyncio.get_running_loop(), uvloop.Loop):
        aiohttp.http_writer.SKIP_WRITELINES = False
        return True
    return False


class ArmClient:
    """One arm's pooled HTTP client; use as an async context manager."""

    def __init__(self, arm: ArmSettings, pool: PoolLimits) -> None:
        self.arm, self.pool = arm, pool
        self._headers = dict(JSON_HEADERS)
        if arm.api_key is not None:
            self._headers["authorization"] = f"Bearer {arm.api_key.get_secret_value()}"
        self._urls: dict[str, URL] = {}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ArmClient:
        zero_copy_writes()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.pool.max_connections, limit_per_host=0,
                                           keepalive_timeout=self.pool.keepalive_expiry_s),
            timeout=self._timeout(None),
            headers=self._headers,
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
            trust_env=False,
        )
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _timeout(self, total_s: float | None) -> aiohttp.ClientTimeout:
        connect_s = self.arm.deadlines.connect_s
        return aiohttp.ClientTimeout(total=total_s, connect=connect_s, sock_connect=connect_s,
                                     sock_read=None)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("ArmClient used outside its 'async with' block")
        return self._session

    def url(self, path: str) -> URL:
        """The arm's URL for ``path`` (parsed once per path)."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.arm.url + path)
        return url

    @asynccontextmanager
    async def open(self, path: str, payload: bytes) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``payload`` (JSON bytes) and yield the response with its body unread."""
        async with self.session.post(self.url(path), data=payload) as response:
            yield response

    async def post(self, path: str, payload: bytes, timeout_s: float | None = None) -> Answer:
        """POST ``payload`` (JSON bytes) and read the whole answer."""
        return await self._whole("POST", path, payload, timeout_s)

    async def get(self, path: str, timeout_s: float | None = None) -> Answer:
        """GET ``path`` and read the whole answer."""
        return await self._whole("GET", path, None, timeout_s)

    async def _whole(self, method: str, path: str, payload: bytes | None,
                     timeout_s: float | None) -> Answer:
        try:
            async with self.session.request(method, self.url(path), data=payload,
                                            timeout=self._timeout(timeout_s)) as response:
                content = await response.read()
                ctype = response.headers.get("content-type", "application/json")
                return Answer(response.status, content, ctype)
        except aiohttp.ClientError as exc:  # includes aiohttp's own timeouts
            raise UpstreamError(type(exc).__name__) from exc
