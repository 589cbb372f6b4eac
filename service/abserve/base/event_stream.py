"""Server-sent events: the one splitter of a ``text/event-stream`` into its events' data.

vLLM streams each chunk as ``data: <json>\n\n``. ``SSEParser`` is fed the raw bytes as they
arrive, in network reads cut anywhere (inside a line, between ``\r`` and ``\n``), and returns
the data payload of every event completed so far: an event ends at a blank line, its
``data:`` lines (the spaces after the colon dropped) are joined with ``\n``, and its
other fields (``event:``, ``id:``, comments) are ignored; an event without data yields
nothing. CRLF line ends are read as LF. How the bytes are cut never changes the payloads:
feeding a stream in any pieces gives what :func:`payloads` gives for it whole.

It lives outside ``router`` and ``traffic`` because both read streams: the router reads each
arm's answer (``abserve.router.sse``), the load generator times the client's
(``abserve.traffic.timing``). Pure; no imports from the rest of abserve.
"""

from __future__ import annotations


class SSEParser:
    """Incremental ``text/event-stream`` parser that yields each event's data payload."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads of the events that ``data`` completes, in order."""
        buf = self._buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        *events, self._buf = buf.split(b"\n\n")
        payloads = []
        for event in events:
            lines = [ln[5:].lstrip(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                payloads.append(b"\n".join(lines))
        return payloads

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered."""
        return bool(self._buf.strip())


def payloads(stream: bytes) -> list[bytes]:
    """The data payloads of a whole stream's complete events (an unfinished tail is dropped)."""
    return SSEParser().feed(stream)
