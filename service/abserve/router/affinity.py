"""Session-affinity headers: the few client headers every arm receives unchanged.

The router sends an arm nothing of the client's request but its body, except these: a load
replaying sessions sends ``x-session-id`` with every turn (``abserve.traffic.turns``), and a
deployment behind an arm may route a session to one replica by such a header (its prefix
cache then holds the session's history). Each header the settings name (``session_headers``)
that the client sent with a plain value (1 to ``MAX_VALUE_LEN`` printable ASCII characters)
goes to every arm as it came, and into the exchange's tags under the header's own name; any
other value is neither forwarded nor recorded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MAX_VALUE_LEN = 256
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
# what the router sets itself, or must never pass on from a client
_OWN = frozenset({"host", "content-type", "content-length", "user-agent", "authorization",
                  "transfer-encoding", "connection", "x-request-id"})


def checked_header_names(names: Iterable[str]) -> list[str]:
    """The names, lower-case; a name that is not a plain header name, or one the router sets
    itself, is refused (``ValueError``)."""
    out: list[str] = []
    for name in names:
        low = name.strip().lower()
        if not _NAME.match(low) or low in _OWN or low.startswith("x-abserve-"):
            raise ValueError(f"session header {name[:64]!r}: a plain header name the router does "
                             "not set itself")
        if low not in out:
            out.append(low)
    return out


def affinity_headers(headers: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """The session headers of a request that are forwarded (and recorded), by name."""
    out: dict[str, str] = {}
    for name in names:
        value = headers.get(name)
        if value is not None and 0 < len(value) <= MAX_VALUE_LEN and value.isascii() \
                and value.isprintable():
            out[name] = value
    return out


def header_bytes(headers: Mapping[str, str]) -> bytes:
    """Header lines for an arm's request head."""
    return b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items())
