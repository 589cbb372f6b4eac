"""Fan-out: one request to every arm at the same instant, each read at full speed.

``FanOut.start`` creates one task per arm in a single loop pass, all sending the same
encoded bytes. Each ``ArmCall`` reads its own upstream as fast as the upstream sends,
timestamps every network read with the same clock at the same point of the same code, and
folds the chunks into a ``Transcript``; its record is the arm's ``ArmOutcome`` and, apart,
the output logprobs as lists (``logprobs``: no per-position models on this path). Only the
primary's call feeds a ``Relay`` (its response head, then chunks into an unbounded queue),
so no arm ever waits on the client, and nothing a non-primary arm does reaches the client.
Of an arm's first read only the first event is folded before the loop turns (every arm
alike): when that read holds a burst (a short answer, a fast arm), the client has its first
event before the rest is folded. The client gets whole events only, each as ``data:`` lines
(vLLM's own framing, so its bytes when nothing is stripped): an event split across reads
goes out once whole.

An arm's answer counts as a success only when it is what vLLM sends for one: a 2xx JSON
object (or SSE stream of them, ended by ``[DONE]``) with well-formed choices. vLLM reports an
engine failure inside a stream as an error event (``data: {"error": {...}}``) followed by
``[DONE]``: that arm is recorded as failed (``http_status``, the event's code in the
detail), and the primary's client receives the event as vLLM sent it. Anything else an arm
may answer (``[1]``, ``{"choices": ["x"]}``...) is a ``bad_response``, and the client of a
primary that answers so gets a 502, never a hang.

Deadlines are per arm and independent: connect (the arm's client, ``upstream``), first
token (send → first token; send → the whole answer when not streamed), stream idle
(between reads after the first token) and total. A failure is classified into
``records.ErrorClass``; error details are exception class names and status codes, never
upstream bodies (they may echo prompt text).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import orjson

from abserve.base.event_stream import SSEParser
from abserve.model.records import ArmOutcome, ErrorClass
from abserve.model.token_lists import PositionLists
from abserve.openai_request.errors import error_body
from abserve.router.augment import Additions, strip
from abserve.router.http1 import ArmTransportError, Body
from abserve.router.settings import Deadlines
from abserve.router.sse import DONE, Transcript
from abserve.router.upstream import ArmClient, Response, error_class

MAX_ERROR_BODY = 64 * 1024
_GATEWAY_STATUS: dict[str, int] = {"timeout_first_token": 504, "timeout_idle": 504,
                                   "timeout_total": 504}


@dataclass
class Head:
    """What the client's response starts with: status, type and (unless streamed) body."""

    status: int
    content_type: str
    body: bytes | None = None


@dataclass
class Relay:
    """The primary arm's answer on its way to the client."""

    additions: Additions
    head: asyncio.Future[Head | None] = field(  # None: the client went away first
        default_factory=lambda: asyncio.get_running_loop().create_future())
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    # True once the primary's terminator ([DONE]) is read: the client has (or is about to
    # have) its whole answer, so its disconnecting no longer cancels any arm.
    complete: bool = False
    # The final bytes, held back from the queue: the event that finishes the answer (its
    # ``finish_reason``), any after it (usage) and the terminator. The client gets them last,
    # once the exchange is stored when acknowledgement waits for the store (``relay``).
    tail: bytes = b""

    def open(self, head: Head | None) -> None:
        if not self.head.done():
            self.head.set_result(head)

    def fail(self, error_class: str) -> None:
        """Report a failure: a gateway error if nothing was sent, else an error event."""
        status = _GATEWAY_STATUS.get(error_class, 502)
        message = f"primary arm failed: {error_class}"
        self.tail = b""  # a failed answer ends with the error event, not its held-back end
        if not self.head.done():
            self.open(Head(status, "application/json", error_body(status, message)))
        else:
            self.queue.put_nowait(b"data: " + error_body(status, message) + b"\n\n")
        self.queue.put_nowait(None)


class UpstreamFailure(Exception):
    """An arm answered, but not with something this router can record as a success."""

    def __init__(self, error_class: ErrorClass, detail: str) -> None:
        super().__init__(detail)
        self.error_class: ErrorClass = error_class


class ArmCall:
    """One arm's side of an exchange; ``outcome`` is complete once ``run`` returns."""

    def __init__(self, name: str, client: ArmClient, deadlines: Deadlines, path: str,
                 payload: Body, stream: bool, t0: float, relay: Relay | None = None,
                 headers: bytes = b"") -> None:
        self.client, self.deadlines, self.path = client, deadlines, path
        self.payload, self.stream, self.t0, self.relay = payload, stream, t0, relay
        self.headers = headers  # the client's session headers, as lines (router/affinity.py)
        self.outcome = ArmOutcome(arm=name)  # all but its output logprobs: ``logprobs``
        self.logprobs = PositionLists()
        self.transcript = Transcript()
        self._phase: ErrorClass = "timeout_first_token"
        self._error_event: str | None = None  # set when the stream carried an error event
        self._done = False  # the stream's terminator ([DONE]) was read
        self._deadline: asyncio.Timeout | None = None

    def _now(self) -> float:
        return time.perf_counter() - self.t0

    async def run(self) -> None:
        """Call the arm and record everything; never raises except on cancellation."""
        out = self.outcome
        out.t_send = self._now()
        try:
            async with asyncio.timeout(self.deadlines.total_s) as total:
                try:
                    await self._call()
                except ArmTransportError as exc:
                    klass = error_class(exc, answered=out.t_first_byte is not None)
                    raise UpstreamFailure(klass, type(exc).__name__) from exc
                except TimeoutError:
                    if total.expired():
                        raise
                    self._failed(self._phase, "deadline passed")
        except TimeoutError:
            self._failed("timeout_total", "deadline passed")
        except UpstreamFailure as exc:
            self._failed(exc.error_class, str(exc))
        except asyncio.CancelledError:
            self._failed("cancelled", "client went away")
            raise
        except Exception as exc:  # an answer of a shape no arm should send
            self._failed("bad_response", type(exc).__name__)
        finally:
            out.t_end = self._now()
            self._fill()

    def _fill(self) -> None:
        try:
            self.logprobs = self.transcript.record(self.outcome)
        except Exception as exc:  # values no vLLM sends (logprob strings...): keep none
            self.logprobs = Transcript().record(self.outcome)
            self._failed("bad_response", type(exc).__name__)

    def _failed(self, error_class: ErrorClass, detail: str) -> None:
        if self.outcome.error_class is not None and error_class == "bad_response":
            return  # the first failure is the cause
        self.outcome.error_class = error_class
        self.outcome.error_detail = detail
        if error_class == "truncated":
            self.outcome.truncated = True
        if self.relay is not None:
            self.relay.fail(error_class)

    async def _call(self) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as phase:
            self._deadline = phase  # not streamed: the whole answer is its first token
            phase.reschedule(loop.time() + self.deadlines.first_token_s)
            async with self.client.open("POST", self.path, self.payload,
                                        self.headers) as response:
                await self._read(response)

    async def _read(self, response: Response) -> None:
        out = self.outcome
        out.t_first_byte = self._now()
        out.status = response.status
        ctype = response.headers.get("content-type", "application/json")
        if not 200 <= response.status < 300:
            body = await _read_capped(response)
            if self.relay is not None:
                self.relay.open(Head(response.status, ctype, body))
                self.relay.queue.put_nowait(None)
            out.error_class, out.error_detail = "http_status", f"HTTP {response.status}"
            return
        if not self.stream:
            await self._read_whole(response, ctype)
            return
        await self._read_stream(response, Head(response.status, ctype))

    async def _read_whole(self, response: Response, ctype: str) -> None:
        raw = await response.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamFailure("bad_response", "body is not JSON") from exc
        self._check_chunk(body)
        self.transcript.add(body, self._now(), streamed=False)
        if self.relay is not None:
            additions = self.relay.additions
            if additions.any:
                raw = orjson.dumps(strip(body, additions))
            self.relay.open(Head(response.status, ctype, raw))
            self.relay.queue.put_nowait(None)
        self._check_error(body)

    async def _read_stream(self, response: Response, head: Head) -> None:
        """Read SSE at full speed; the client's head goes out with the first data, so a
        primary that misses its first-token deadline is still a clean 504."""
        parser, seen, first = SSEParser(), 0, True
        loop = asyncio.get_running_loop()
        async for data in response.iter_any():
            t = self._now()
            events = parser.feed(data)
            seen += len(events)
            if first:  # the first event goes out to the client (and the loop turns) before
                first = False  # the rest of a burst is read: every arm alike
                self._forward(head, self._take(events[:1], t))
                await asyncio.sleep(0)
                self._forward(head, self._take(events[1:], t))
            else:
                self._forward(head, self._take(events, t))
            if self.transcript.t_first_token is not None and self._deadline is not None:
                self._phase = "timeout_idle"
                self._deadline.reschedule(loop.time() + self.deadlines.idle_s)
        if self._error_event is not None:  # relayed as vLLM sent it; recorded as a failure
            self.outcome.error_class = "http_status"
            self.outcome.error_detail = f"error event in stream ({self._error_event})"
        elif not self._done:
            if seen == 0 and parser.pending:
                raise UpstreamFailure("bad_response", "stream is not SSE")
            raise UpstreamFailure("truncated", "stream ended without [DONE]")
        if self.relay is not None:
            self.relay.queue.put_nowait(None)

    def _take(self, events: list[bytes], t: float) -> list[bytes]:
        """Fold events read at ``t`` into the transcript; what the client gets of them
        (the primary's events with the router's additions stripped; none of other arms')."""
        parts: list[bytes] = []
        for payload in events:
            chunk = self._fold(payload, t)
            if self.relay is not None:
                out = _client_event(payload, chunk, self.relay.additions)
                if payload == DONE or (out is not None and self.transcript.finish_reason is not None):
                    self.relay.tail += out or b""  # the finishing event on: sent last (Relay.tail)
                elif out is not None:
                    parts.append(out)
        return parts

    def _fold(self, payload: bytes, t: float) -> dict[str, object] | None:
        """Fold one event into the transcript; the event parsed when the checked way read it."""
        if payload == DONE:
            self._done = True
            return None
        if self.transcript.add_event(payload, t):  # what vLLM sends: the fast way
            return None
        return self._checked(payload, t)

    def _forward(self, head: Head, parts: list[bytes]) -> None:
        """The primary's client gets its head and ``parts``: whole events only, so an
        event split across reads reaches it once, whole, when its end is read."""
        if self.relay is None:
            return
        self.relay.open(head)
        self.relay.complete = self._done
        if parts:
            self.relay.queue.put_nowait(b"".join(parts))

    def _checked(self, payload: bytes, t: float) -> dict[str, object]:
        """One event read the checked way (any shape an arm may send)."""
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise UpstreamFailure("bad_response", "event is not JSON") from exc
        self._check_chunk(chunk)
        self._error_event = self._error_event or _error_code(chunk)
        self.transcript.add(chunk, t)
        checked: dict[str, object] = chunk  # a dict: _check_chunk said so
        return checked

    @staticmethod
    def _check_chunk(chunk: object) -> None:
        """A chunk or body must be an object whose choices (if any) are objects."""
        if not isinstance(chunk, dict):
            raise UpstreamFailure("bad_response", "answer is not a JSON object")
        choices = chunk.get("choices")
        if choices is not None and not (isinstance(choices, list)
                                        and all(isinstance(c, dict) for c in choices)):
            raise UpstreamFailure("bad_response", "choices are not a list of objects")

    def _check_error(self, body: dict[str, object]) -> None:
        """A whole 2xx answer that is vLLM's error object is a failure (relayed as is)."""
        code = _error_code(body)
        if code is not None:
            self.outcome.error_class = "http_status"
            self.outcome.error_detail = f"error object in a 2xx answer ({code})"


def _client_event(payload: bytes, chunk: dict[str, object] | None,
                  additions: Additions) -> bytes | None:
    """One event (``chunk``: parsed already, or None) as the primary's client gets it; None
    when stripping the router's additions drops it."""
    if payload == DONE:
        return b"data: [DONE]\n\n"
    if not additions.any:
        return _event_bytes(payload)
    stripped = strip(chunk if chunk is not None else orjson.loads(payload), additions)
    return None if stripped is None else b"data: " + orjson.dumps(stripped) + b"\n\n"


def _event_bytes(payload: bytes) -> bytes:
    """One event as a client reads it (each line of ``payload`` a ``data:`` line)."""
    return b"data: " + payload.replace(b"\n", b"\ndata: ") + b"\n\n"


def _error_code(chunk: dict[str, object]) -> str | None:
    """``code N`` when ``chunk`` is vLLM's error object ``{"error": {...}}``, else None."""
    error = chunk.get("error")
    if error is None:
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return f"code {code}" if isinstance(code, int) else "no code"


async def _read_capped(response: Response, limit: int = MAX_ERROR_BODY) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for data in response.iter_any():
        parts.append(data)
        size += len(data)
        if size >= limit:
            break
    return b"".join(parts)


_shuffle = random.SystemRandom().shuffle


@dataclass
class FanOut:
    """One client request in flight to every arm."""

    calls: dict[str, ArmCall]
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def start(self) -> None:
        """Start every arm's call in the same loop pass: they send at the same instant. The
        order within that pass is shuffled per request, so no arm (the primary, say) is
        always first on the wire and first in its server's queue."""
        order = list(self.calls)
        _shuffle(order)
        self.tasks = {name: asyncio.create_task(self.calls[name].run(), name=f"arm-{name}")
                      for name in order}

    def cancel(self) -> None:
        """Cancel every arm still running (client gone)."""
        for task in self.tasks.values():
            task.cancel()

    async def wait(self) -> dict[str, ArmOutcome]:
        """Wait for every arm; return their outcomes (their output logprobs: ``logprobs``)."""
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        return {name: call.outcome for name, call in self.calls.items()}

    def logprobs(self) -> dict[str, PositionLists]:
        """Every arm's output logprobs, as lists (complete once ``wait`` returned)."""
        return {name: call.logprobs for name, call in self.calls.items()}
