"""A primary whose first read holds a burst of events: the client gets the first event
before the rest of the burst is folded, and then everything, as vLLM sent it; and an
event split across two reads reaches the client whole, once.

A real arm client against a scripted loopback arm that writes its whole stream in one
piece (what a short answer, or a fast arm at one stream, looks like to the router), or
in two pieces cut inside an event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
import pytest
from tests.unit.router.test_router_http1 import client, serving

from abserve.router.augment import Additions
from abserve.router.fanout import ArmCall, Relay
from abserve.router.settings import Deadlines

pytestmark = pytest.mark.server  # the router forwards to an upstream listening on a port


def event(content: str, **extra: object) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": None, **extra}
    return b"data: " + orjson.dumps({"id": "c1", "choices": [choice]}) + b"\n\n"


TOKENS = ["Hel", "lo", " wor", "ld"]
BURST = b"".join(event(t, token_ids=[i]) for i, t in enumerate(TOKENS)) + b"data: [DONE]\n\n"


def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(BURST), BURST))


async def relayed(arm_answer: Callable[[bytes, asyncio.StreamWriter], object],
                  additions: Additions) -> tuple[ArmCall, list[bytes]]:
    """The arm call's outcome and every piece its client was sent (the terminator last: it is
    held back as the relay's tail until the exchange is stored)."""
    async with serving(arm_answer) as arm, client(arm.port) as arm_client:
        relay = Relay(additions)
        call = ArmCall("a", arm_client, Deadlines(), "/v1/chat/completions", (b"{}",),
                       True, time.perf_counter(), relay)
        await call.run()
    sent = []
    while (item := relay.queue.get_nowait()) is not None:
        sent.append(item)
    return call, [*sent, relay.tail]


@pytest.mark.parametrize("cut", [len(BURST) // 3, len(BURST) // 2, len(BURST) - 3])
async def test_an_event_split_across_reads_reaches_the_client_whole(cut: int) -> None:
    async def in_two_reads(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(BURST), BURST[:cut]))
        await writer.drain()
        await asyncio.sleep(0.05)  # two reads at the router
        writer.write(BURST[cut:])

    call, sent = await relayed(in_two_reads, Additions())
    assert b"".join(sent) == BURST  # nothing stripped: vLLM's bytes
    assert all(piece.endswith(b"\n\n") for piece in sent)  # whole events only
    assert call.outcome.text == "".join(TOKENS)
    assert call.outcome.error_class is None


@pytest.mark.parametrize("additions", [Additions(), Additions(token_ids=True)],
                         ids=["as sent", "token ids stripped"])
async def test_first_event_reaches_the_client_before_the_rest_is_folded(
        additions: Additions) -> None:
    async with serving(answer) as arm, client(arm.port) as arm_client:
        relay = Relay(additions)
        call = ArmCall("a", arm_client, Deadlines(), "/v1/chat/completions", (b"{}",),
                       True, time.perf_counter(), relay)
        task = asyncio.create_task(call.run())
        first = await relay.queue.get()
        assert first is not None
        folded_then = "".join(call.transcript.text)
        await task
        rest = []
        while (item := relay.queue.get_nowait()) is not None:
            rest.append(item)
        assert b"[DONE]" not in b"".join(rest)  # held back, sent last (relay.tail)
        rest.append(relay.tail)
    assert folded_then == TOKENS[0]  # only the first event was read when it went out
    assert call.outcome.text == "".join(TOKENS)
    assert call.outcome.error_class is None
    sent = [orjson.loads(line[6:]) for line in (first + b"".join(rest)).split(b"\n\n")
            if line.startswith(b"data: {")]
    assert [c["choices"][0]["delta"]["content"] for c in sent] == TOKENS
    ids = [c["choices"][0]["token_ids"] for c in sent]  # the router's additions: nulled
    assert ids == ([None] * len(TOKENS) if additions.token_ids else [[i] for i in range(4)])
    assert (first + b"".join(rest)).endswith(b"data: [DONE]\n\n")
    assert first.count(b"data: ") == 1
