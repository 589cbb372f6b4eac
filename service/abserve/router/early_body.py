"""A large request body sent on to every arm while it still arrives, its end held back.

Why: at one stream a ~1 MB request spent about a millisecond after the router had checked
it only on being copied to two arms and read by them (the arms' reading shares the
machine's cores with the router); a memory arm answers 0.1 ms after the last byte of a
body it already holds, 1.3 ms after a whole 1 MB body written at once
(``benchmarks/router_overhead.md``). So while the client's body arrives, each piece is
written on to every arm as an HTTP chunk, all but the last ``HOLD`` bytes; the checks
run on the whole body as before; the held-back end (up to the closing brace), the
router's added keys and the chunked terminator go out when the arm calls start.

Why that is safe: a server hands a JSON request to its handler only once the body is
complete (vLLM's OpenAI server parses it whole with pydantic), and the body cannot be
complete without its last chunk. A request the router refuses after all (not JSON, a
media URL not allowed, too large, too slow, a client gone) is only a connection the
router closes: no arm parses, fetches or computes anything for it.

When: a ``Content-Length`` of at least ``early_body_min_bytes`` (below that there is
little to gain), and only when every arm has an idle keep-alive connection at hand
(``ArmClient.take_idle``: nothing waits for a connection before the body is read). If
any arm's early send fails (a write to a closed connection, an answer before the body
ended, an end that cannot be sent as the rest of what was sent), every arm's is given up
and every arm is sent the whole request as before: the arms are always treated alike.
"""

from __future__ import annotations

from abserve.router.http1 import ArmTransportError, Body, Connection
from abserve.router.upstream import ArmClient

HOLD = 64  # bytes of the body kept back until it is checked: its end is rewritten
FLUSH = 1 << 40  # bytes written to the arms at a time: each write wakes every arm
TERMINATOR = b"0\r\n\r\n"


def chunk(pieces: Body) -> Body:
    """``pieces`` framed as one HTTP/1.1 chunk (none when they are empty)."""
    size = sum(map(len, pieces))
    return (b"%x\r\n" % size, *pieces, b"\r\n") if size else ()


class EarlyBody:
    """One request's body on its way to every arm; ``feed`` it, then ``finish`` or
    ``abort`` (exactly one of them, always)."""

    def __init__(self, clients: dict[str, ArmClient], conns: dict[str, Connection]) -> None:
        self.clients, self.conns = clients, conns
        self.forwarded = 0  # body bytes written to every arm
        self._waiting: list[bytes] = []  # received, not yet written (the last HOLD at least)
        self._waiting_len = 0

    @classmethod
    async def start(cls, clients: dict[str, ArmClient], path: str, content_length: str | None,
                    min_bytes: int | None, max_bytes: int) -> EarlyBody | None:
        """Begin the request on every arm, or None (too small, unknown size, an arm
        without an idle connection)."""
        if min_bytes is None or content_length is None or not content_length.isdigit():
            return None
        if not min_bytes <= int(content_length) <= max_bytes:
            return None
        conns: dict[str, Connection] = {}
        for name, client in clients.items():
            conn = await client.take_idle()
            if conn is None:
                for taken, unused in conns.items():
                    clients[taken].put_back(unused)
                return None
            conns[name] = conn
        early = cls(clients, conns)
        try:
            for name, conn in conns.items():
                clients[name].begin_chunked(conn, "POST", path)
        except ArmTransportError:
            early.abort()
            return None
        return early

    def feed(self, piece: bytes) -> None:
        """The client's next piece. Once ``FLUSH`` bytes wait, everything received so far
        but the last ``HOLD`` bytes goes to every arm."""
        if not self.conns:
            return
        self._waiting.append(piece)
        self._waiting_len += len(piece)
        if self._waiting_len < FLUSH + HOLD:
            return
        self.flush()

    def flush(self) -> None:
        if not self.conns or self._waiting_len <= HOLD:
            return
        last = self._waiting[-1]
        if len(last) >= HOLD:
            cut = len(last) - HOLD
            out: Body = (*self._waiting[:-1], memoryview(last)[:cut])
            held = last[cut:]
        else:
            both = b"".join(self._waiting)
            out, held = (memoryview(both)[:-HOLD],), both[-HOLD:]
        self._waiting, self._waiting_len = [held], len(held)
        self._send(chunk(out))
        self.forwarded += sum(map(len, out))

    def finish(self, raw: bytes, used: int, extra: bytes
               ) -> dict[str, tuple[Connection, Body]] | None:
        """Each arm's connection and what its request still needs, the body being
        ``raw[:used] + extra``: the rest as a last chunk, then the terminator (for
        ``ArmClient.open(..., conn=)``, which gives the connection back). None, everything
        given up, when that body does not continue what was sent or an arm's connection
        is gone or has answered already."""
        if not self.conns:
            return None
        gone = any(conn.closed or conn.answered for conn in self.conns.values())
        if gone or used < self.forwarded or len(raw) != self.forwarded + self._waiting_len:
            self.abort()
            return None
        rest = (*chunk((memoryview(raw)[self.forwarded:used], extra)), TERMINATOR)
        conns, self.conns = self.conns, {}
        return {name: (conn, rest) for name, conn in conns.items()}

    def abort(self) -> None:
        """Close every arm's unfinished request; no arm will act on it."""
        conns, self.conns = self.conns, {}
        for name, conn in conns.items():
            self.clients[name].discard(conn)

    def _send(self, pieces: Body) -> None:
        if not pieces:
            return
        try:
            for conn in self.conns.values():
                conn.send_more(pieces)
        except ArmTransportError:
            self.abort()
