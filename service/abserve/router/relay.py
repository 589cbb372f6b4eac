"""The client's side: waiting for the primary's head and relaying its stream.

The client's response starts when the primary arm's response head is known (or its
failure: 502, or 504 for a deadline; never another arm's answer). A streamed answer is
pumped from the primary's queue; if the primary fails mid-stream the client gets an
OpenAI-style error event and no ``[DONE]``. A client that goes away, while waiting or
while streaming, cancels every arm.

With ``wait_all`` (settings ``client_waits_for: all_arms``) the client's response ends only
when every arm's call has ended: the primary's answer is relayed as it comes, but the end of
the response (or the whole response, when not streamed) waits for the other arms. A client
that sends its next request when the previous one ends (any benchmark client with a
concurrency limit) then keeps every arm, not only the primary, at that concurrency: no arm
builds a queue the client cannot see, which would make its latencies worse than the
primary's on identical builds.

With ``stored`` (settings ``acknowledge: stored``, the default) the final bytes of the answer
(a stream's last event, the one with its ``finish_reason``, whatever follows it and
``[DONE]``, or a whole JSON body) go out only once the exchange's record is committed to the
store (which needs every arm, so it implies ``wait_all``): a client that received its whole
answer can count on its record surviving a crash of the router. Every event before the
finishing one goes out as it comes, so the client's first token does not move (unless the
answer is one event long); nor does any arm's timing, measured from the arms' bytes. When the record
could not be stored the client gets an error instead (an error event and no ``[DONE]``, or
a 500), never an acknowledgement.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from abserve.openai_request.errors import error_body
from abserve.router.fanout import FanOut, Head, Relay

NOT_STORED = "the exchange could not be stored; its answer is withheld"


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class ClientWatch:
    """Watches the client's connection for the whole exchange. If the client goes away
    before its answer is complete, every arm is cancelled and a response still waiting
    for the primary's head stops waiting. ``stop`` before the last send: a server reports
    ``http.disconnect`` once a response is complete, which is no reason to cancel shadow
    arms that may still be streaming."""

    def __init__(self, relay: Relay, fan: FanOut, receive: Receive) -> None:
        self.relay, self.fan, self.stopped = relay, fan, False
        self._task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        await _until_disconnect(receive)
        if not self.stopped and not self.relay.complete:
            self.fan.cancel()
            self.relay.open(None)

    def stop(self) -> None:
        self.stopped = True
        self._task.cancel()


class RelayResponse(Response):
    """The primary's stream as the client's response, sent as it is queued (whatever is
    queued when the client's socket is next written goes out in one write). Leaner than
    ``StreamingResponse``: no task group and no async generator per response."""

    def __init__(self, relay: Relay, fan: FanOut, head: Head, headers: dict[str, str],
                 watch: ClientWatch, wait_all: bool = False,
                 stored: asyncio.Future[bool] | None = None) -> None:
        self.relay, self.fan, self.watch, self.wait_all = relay, fan, watch, wait_all
        self.stored = stored
        self.status_code, self.media_type, self.background = head.status, head.content_type, None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            queue = self.relay.queue
            item = await queue.get()
            while item is not None:
                await send({"type": "http.response.body", "body": item, "more_body": True})
                item = _coalesce(queue) if queue.qsize() > 1 else await queue.get()
        except BaseException:  # sending to the client failed, or this task was cancelled
            self.watch.stop()
            if not self.relay.complete:
                self.fan.cancel()
            raise
        self.watch.stop()
        tail = self.relay.tail
        if self.stored is not None:
            if not await asyncio.shield(self.stored):
                tail = b"data: " + error_body(500, NOT_STORED) + b"\n\n"
        elif self.wait_all:
            await all_arms_done(self.fan)
        await send({"type": "http.response.body", "body": tail, "more_body": False})


async def all_arms_done(fan: FanOut) -> None:
    """Wait until every arm's call has ended (each is bounded by its own deadlines). Never
    cancels an arm, even when this wait is cancelled."""
    tasks = list(fan.tasks.values())
    if tasks:
        await asyncio.wait(tasks)


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


async def respond(relay: Relay, fan: FanOut, receive: Receive, headers: dict[str, str],
                  wait_all: bool = False, stored: asyncio.Future[bool] | None = None) -> Response:
    """The client's response: the primary's answer, relayed (ended once every arm has
    ended, with ``wait_all``; once the exchange is stored, with ``stored``)."""
    watch = ClientWatch(relay, fan, receive)
    try:
        head = await relay.head
    except BaseException:
        watch.stop()
        fan.cancel()
        raise
    if head is None:  # the client went away first (every arm is being cancelled)
        return Response(status_code=499, headers=headers)
    if head.body is not None:
        watch.stop()
        if stored is not None:
            if not await asyncio.shield(stored):
                return Response(error_body(500, NOT_STORED), status_code=500,
                                media_type="application/json", headers=headers)
        elif wait_all:
            await all_arms_done(fan)
        return Response(head.body, status_code=head.status, media_type=head.content_type,
                        headers=headers)
    return RelayResponse(relay, fan, head, headers, watch, wait_all, stored)
