"""One keep-alive HTTP/1.1 connection to an arm: an asyncio protocol and httptools' parser.

Why not a general HTTP client: the router sends every ~1 MB request to every arm and reads
every arm's stream, so the client's CPU is paid once per arm per request. This protocol
does only what an arm call needs: write a request head and body as they are (one
``writelines``, no copy of the body), parse the answer with httptools (the C parser uvicorn
uses; chunked transfer decoded there), and hand the body to the reader as it arrives, all
that arrived since the last read joined in one piece. It has no redirects, cookies,
decompression or proxies, which an arm call must not have anyway.

Failures are two classes, by what the caller can conclude (``records.ErrorClass``):
``ConnectFailed``, no answer began (refused, connect timeout, closed or unparseable before
the head), and ``AnswerBroken``, the answer began and then the connection broke or the
bytes stopped being HTTP. An answer framed by neither length nor chunking ends with the
connection, as HTTP/1.1 says.
"""

from __future__ import annotations

import asyncio
from collections import deque

import httptools

Body = tuple[bytes | memoryview, ...]  # a request body's pieces, written one after another


class ArmTransportError(Exception):
    """The connection to an arm failed; see the subclasses."""


class ConnectFailed(ArmTransportError):
    """No answer began: the arm was not reached, or closed before its response head."""


class AnswerBroken(ArmTransportError):
    """The answer began, then the connection broke (or stopped speaking HTTP)."""


class Connection(asyncio.Protocol):
    """One connection; one request at a time (``send``, ``wait_head``, ``read_some``)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0  # loop time it was last released for reuse
        self._begin()

    def _begin(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.complete = False
        self._head = asyncio.get_running_loop().create_future()
        self._pieces: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: ArmTransportError | None = None
        self._until_eof = False
        self._keep_alive = False  # the parser knows it only while the head is read

    # -- the caller's side -------------------------------------------------------------

    def send(self, head: bytes, body: Body) -> None:
        """Write one request (head as built by the caller, body's pieces as they are)."""
        if self.transport is None or self.closed:
            raise ConnectFailed("connection closed")
        if self.complete or self._head.done():
            self._begin()
        self.transport.writelines((head, *body))

    async def wait_head(self) -> None:
        """Wait until the response head arrived (``status`` and ``headers`` are set)."""
        await asyncio.shield(self._head)

    async def read_some(self) -> bytes | None:
        """All body bytes that arrived since the last call (waiting for some); None at
        the end of the answer."""
        while not self._pieces:
            if self.complete:
                return None
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if len(self._pieces) == 1:
            return self._pieces.popleft()
        data = b"".join(self._pieces)
        self._pieces.clear()
        return data

    @property
    def reusable(self) -> bool:
        """The last answer was read to its end and both sides keep the connection."""
        return self.complete and not self.closed and self._keep_alive

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP (or TLS) transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"not HTTP ({type(exc).__name__})")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._head.done() and self._until_eof and not self.complete:
            self.on_message_complete()  # a body without length or chunks ends here
        elif not self.complete:
            self._fail("connection closed" if exc is None else type(exc).__name__)

    # -- httptools callbacks -------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._keep_alive = self.parser.should_keep_alive()
        framed = "content-length" in self.headers or "transfer-encoding" in self.headers
        self._until_eof = not framed and self.status not in (204, 304)
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._pieces.append(body)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        if not self._head.done():  # pragma: no cover - httptools calls the head first
            self._head.set_result(None)
        self._wake()

    # -- internals -----------------------------------------------------------------------

    def _fail(self, why: str) -> None:
        if self._error is not None or self.complete:
            return
        if self._head.done():
            self._error = AnswerBroken(why)
        else:
            self._error = ConnectFailed(why)
            self._head.set_exception(self._error)
            self._head.exception()  # retrieved: nobody may be waiting for it
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
