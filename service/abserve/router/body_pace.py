"""A floor on the rate a request body arrives at: a slow client cannot hold memory for long.

``app.fan_out`` reads a body while its request holds an admission slot, and buffers it, up to
``max_body_bytes``, until the whole body is there. ``body_timeout_s`` bounds the whole read,
but alone it let a client send 30 MiB and then stall, holding the memory and the slot for the
full timeout (8 such bodies held 240 MiB and every slot for 60 s; ordinary requests got 503).

``paced`` passes a body's chunks on while at least ``min_bytes_per_s × window_s`` bytes
arrive in every ``window_s`` window (counted from the start of the read); a window that ends
short is a 408, the slot and the buffer are released (``app.fan_out``) and the connection is
closed (``http_limits``: its body was not read in full). A body that stops arriving is so
answered within two windows of its last byte, and a trickle as soon as a window is short. A
body that ends early in a window is never judged on that window. ``min_bytes_per_s = 0`` turns
the floor off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from abserve.openai_request.errors import RouterError


def too_slow(min_bytes_per_s: int, window_s: float) -> RouterError:
    return RouterError(408, f"request body arrived slower than {min_bytes_per_s} bytes/s "
                            f"over {window_s:g} s")


async def paced(chunks: AsyncIterator[bytes], min_bytes_per_s: int,
                window_s: float) -> AsyncIterator[bytes]:
    """``chunks`` as they come, or a 408 once a window receives less than the floor."""
    if min_bytes_per_s <= 0:
        async for chunk in chunks:
            yield chunk
        return
    loop = asyncio.get_running_loop()
    need = min_bytes_per_s * window_s
    window_end, got = loop.time() + window_s, 0
    iterator = aiter(chunks)
    while True:
        # the first moment the floor is certainly broken: this window's end while it is short,
        # else the end of the next window (which has nothing yet)
        deadline = window_end if got < need else window_end + window_s
        try:
            async with asyncio.timeout_at(deadline):
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise too_slow(min_bytes_per_s, window_s) from None
        now = loop.time()
        while now >= window_end:  # the chunk came in a later window: close the earlier ones
            if got < need:
                raise too_slow(min_bytes_per_s, window_s)
            window_end, got = window_end + window_s, 0
        got += len(chunk)
        yield chunk
