"""The rate floor on a request body (``router/body_pace.py``): chunks pass on while every
window receives its share; a body that stops, or trickles, is a 408 at the first short window,
not at the end of the whole body timeout. Timed with short real sleeps (windows of 0.2 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from abserve.openai_request.errors import RouterError
from abserve.router.body_pace import paced

WINDOW = 0.2


async def arriving(chunks: Sequence[tuple[float, bytes]]) -> AsyncIterator[bytes]:
    """Each chunk after its pause (seconds)."""
    for pause, chunk in chunks:
        await asyncio.sleep(pause)
        yield chunk


async def read(chunks: Sequence[tuple[float, bytes]], floor: int) -> bytes:
    return b"".join([c async for c in paced(arriving(chunks), floor, WINDOW)])


async def test_a_body_that_keeps_up_is_passed_on_whole() -> None:
    chunks = [(0.05, b"x" * 100)] * 12  # 2000 bytes/s, over 0.6 s: three windows
    assert await read(chunks, floor=1000) == b"x" * 1200


async def test_a_body_that_ends_within_a_short_window_is_not_judged_on_it() -> None:
    assert await read([(0.0, b"x" * 10), (0.1, b"y")], floor=10**6) == b"x" * 10 + b"y"


@pytest.mark.parametrize("then", ["stalls", "trickles"])
async def test_a_body_that_slows_after_a_fast_start_is_408_within_two_windows(then: str) -> None:
    fast = [(0.0, b"x" * 10**6)]  # far above the floor for the first window
    rest = [(10.0, b"y")] if then == "stalls" else [(0.05, b"y")] * 200
    started = time.monotonic()
    with pytest.raises(RouterError) as err:
        await read(fast + rest, floor=1000)
    took = time.monotonic() - started
    assert err.value.status == 408
    assert "request body arrived slower than 1000 bytes/s over 0.2 s" in str(err.value)
    assert WINDOW < took < 2 * WINDOW + 0.6, took  # not the 10 s the body would take


async def test_a_chunk_after_a_silent_window_is_408() -> None:
    """A window that passes empty breaks the floor, however much arrives after it."""
    with pytest.raises(RouterError):
        await read([(0.0, b"x" * 1000), (2.5 * WINDOW, b"y" * 10**6)], floor=1000)


async def test_a_floor_of_zero_waits_as_long_as_the_body_takes() -> None:
    assert await read([(0.0, b"x"), (3 * WINDOW, b"y")], floor=0) == b"xy"
