"""The client's side: waiting for the primary's head and relaying its stream.

The client's response starts when the primary arm's response head is known (or its
failure: 502, or 504 for a deadline; never another arm's answer). A streamed answer is
pumped from the primary's queue; if the primary fails mid-stream the client gets an
OpenAI-style error event and no ``[DONE]``. A client that goes away, while waiting or
while streaming, cancels every arm.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from abserve.router.fanout import FanOut, Head, Relay


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _wait_head(relay: Relay, receive: Receive) -> Head | None:
    """The primary's head, or None when the client disconnects first."""
    watcher = asyncio.ensure_future(_until_disconnect(receive))
    try:
        either: set[asyncio.Future[object]] = {relay.head, watcher}  # type: ignore[arg-type]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    return relay.head.result() if relay.head.done() else None


class RelayResponse(Response):
    """The primary's stream as the client's response, sent as it is queued (whatever is
    queued when the client's socket is next written goes out in one write).

    Leaner than ``StreamingResponse`` (no task group, no async generator per response): one
    watcher task waits for the client to go away and then cancels every arm (the primary's
    failure ends the queue). The watcher is stopped before the last send, because a server
    reports ``http.disconnect`` once a response is complete, which is no reason to cancel
    the shadow arms that may still be streaming.
    """

    def __init__(self, relay: Relay, fan: FanOut, head: Head, headers: dict[str, str]) -> None:
        self.relay, self.fan = relay, fan
        self.status_code, self.media_type, self.background = head.status, head.content_type, None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        finished = False

        async def watch() -> None:
            await _until_disconnect(receive)
            if not finished:
                self.fan.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            queue = self.relay.queue
            item = await queue.get()
            while item is not None:
                await send({"type": "http.response.body", "body": item, "more_body": True})
                item = _coalesce(queue) if queue.qsize() > 1 else await queue.get()
            finished = True
        finally:
            watcher.cancel()
            if not finished:  # the client went away, or sending to it failed
                self.fan.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _coalesce(queue: asyncio.Queue[bytes | None]) -> bytes | None:
    """Everything queued up to the end marker, as one write (fewer sends, never a wait);
    None when the end marker comes first."""
    parts: list[bytes] = []
    while not queue.empty():
        item = queue.get_nowait()
        if item is None:
            queue.put_nowait(None)  # the end comes after these parts
            break
        parts.append(item)
    return b"".join(parts) if parts else None


async def respond(relay: Relay, fan: FanOut, receive: Receive,
                  headers: dict[str, str]) -> Response:
    """The client's response: the primary's answer, relayed."""
    head = await _wait_head(relay, receive)
    if head is None:
        fan.cancel()
        return Response(status_code=499, headers=headers)
    if head.body is not None:
        return Response(head.body, status_code=head.status, media_type=head.content_type,
                        headers=headers)
    return RelayResponse(relay, fan, head, headers)
