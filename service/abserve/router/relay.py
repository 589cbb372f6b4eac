"""The client's side: waiting for the primary's head and relaying its stream.

The client's response starts when the primary arm's response head is known (or its
failure: 502, or 504 for a deadline; never another arm's answer). A streamed answer is
pumped from the primary's queue; if the primary fails mid-stream the client gets an
OpenAI-style error event and no ``[DONE]``. A client that goes away, while waiting or
while streaming, cancels every arm.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

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


async def _pump(relay: Relay, fan: FanOut) -> AsyncIterator[bytes]:
    finished = False
    try:
        while (item := await relay.queue.get()) is not None:
            yield item
        finished = True
    finally:
        if not finished:  # the client went away mid-stream
            fan.cancel()


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
    return StreamingResponse(_pump(relay, fan), status_code=head.status,
                             media_type=head.content_type, headers=headers)
