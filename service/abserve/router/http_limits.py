"""Limits on what a client's connection may cost before its request reaches the app.

The router is served by uvicorn with httptools (``router/serve.py``). uvicorn's own limits
do not cover a slow or huge request head there: ``h11_max_incomplete_event_size`` exists for
the h11 parser only; ``timeout_keep_alive`` starts after a response, so a connection that
never finishes its head (slowloris) was never closed; httptools buffers a header of any size
(8 unfinished 16 MiB headers added 160 MiB to the router). ``limited_protocol`` returns
uvicorn's httptools protocol with two more limits per connection:

- head size: bytes received while a request head is incomplete; past ``max_header_bytes``
  the client gets 431 and the connection is closed (memory per connection is bounded by
  the limit plus one socket read);
- head time: a head not complete ``header_timeout_s`` after the connection opened or the
  request began is answered 408 and the connection closed.

Bodies are the app's business: ``app.fan_out`` reads a body under its own deadline
(``body_timeout_s``, 408) and rate floor (``min_body_bytes_per_s``, ``router/body_pace.py``)
while holding an admission slot, so stalled bodies count against ``max_concurrency``, and
only for a few seconds once they stop arriving.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


def _reply_and_close(transport: asyncio.Transport, status: int, message: str) -> None:
    body = message.encode()
    transport.write(b"".join([
        STATUS_LINE[status], b"content-type: text/plain; charset=utf-8\r\n",
        b"content-length: ", str(len(body)).encode(), b"\r\nconnection: close\r\n\r\n", body]))
    transport.close()


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded request head (size and time)."""

    max_header_bytes = 64 * 1024
    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._head_done = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_done or self.transport.is_closing():
            return
        self._head_bytes += len(data)  # the head is still incomplete after these bytes
        if self._head_bytes > self.max_header_bytes:
            self._stop_head_timer()
            self.logger.warning("request head over %d bytes: connection closed",
                                self.max_header_bytes)
            _reply_and_close(self.transport, 431,
                             f"request head exceeds {self.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_done, self._head_bytes = False, 0
        if self._head_timer is None:
            self._start_head_timer()

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._stop_head_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        if self.cycle is not None and self.cycle.more_body:  # answered (408, 413...) before
            self.transport.close()  # its body was read in full: a stalled sender keeps nothing
        super().on_response_complete()

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._head_done or self.transport.is_closing():
            return
        self.logger.warning("request head not complete after %g s: connection closed",
                            self.header_timeout_s)
        _reply_and_close(self.transport, 408,
                         f"request head not received within {self.header_timeout_s:g} s")


def limited_protocol(max_header_bytes: int, header_timeout_s: float) -> type[HttpToolsProtocol]:
    """The protocol class to give uvicorn (``http=``) with these limits."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {
        "max_header_bytes": max_header_bytes, "header_timeout_s": header_timeout_s})
