"""One request read from a traffic file, before abserve checks and prepares it.

Every reader (``openai_jsonl``, ``bench_datasets``, ``corpus_jsonl``) turns one item of its
format into an ``Imported``: the endpoint, the request body as a dict, its recorded arrival
(seconds on any clock; only differences count) and the tags the line carried. A reader that
cannot make sense of an item raises ``LineError``; the caller adds the file and line. A turn
of a session carries its ``SessionMark`` (``session_of``: the keys ``session_id``, ``turn``
and ``think_s`` beside the request); ``sources.sessions`` checks the
order and numbers the turns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Endpoint = Literal["chat/completions", "completions"]
ENDPOINT_PATHS: dict[Endpoint, str] = {"chat/completions": "/v1/chat/completions",
                                       "completions": "/v1/completions"}


class LineError(ValueError):
    """One item of a traffic file that cannot be sent; the message never quotes its text."""


@dataclass(frozen=True)
class SessionMark:
    """A request's session as the file states it (checked and numbered by ``sessions``)."""

    key: str  # the session's id as written
    turn: int | None = None  # 1-based, when the file numbers its turns
    think_s: float = 0.0  # pause after the previous turn ended, before this one


@dataclass
class Imported:
    """A request as a reader understood it."""

    line: int
    endpoint: Endpoint
    body: dict[str, Any]
    arrival: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    fmt: str = "openai"
    image_refs: int = 0  # image paths a bench format named (inlined later)
    session: SessionMark | None = None  # a turn of a session
    # whether the prompt begins with content an earlier request sent: a reader that knows
    # (a trace's shared blocks) sets it; ``sessions`` sets it for the turns of a session
    shared_prefix: bool | None = None


def arrival_of(meta: dict[str, Any]) -> float | None:
    """A line's arrival: ``timestamp`` (epoch seconds or ISO 8601) or ``offset`` seconds."""
    for key in ("offset", "offset_s"):
        if key in meta:
            value = meta[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise LineError(f"'{key}' must be a number of seconds >= 0")
            return float(value)
    if "timestamp" not in meta:
        return None
    value = meta["timestamp"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            raise LineError("'timestamp' is neither epoch seconds nor ISO 8601") from None
    raise LineError("'timestamp' must be a number or an ISO 8601 string")


def tags_of(meta: dict[str, Any]) -> dict[str, str]:
    """A line's own ``tags`` mapping, values as text (checked later like run tags)."""
    raw = meta.get("tags")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise LineError("'tags' must be a mapping of names to values")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, dict | list) or value is None:
            raise LineError(f"tag {key!r} must be a plain value")
        out[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


SESSION_KEYS = frozenset({"session_id", "turn", "think_s"})


def session_of(meta: dict[str, Any]) -> SessionMark | None:
    """A line's session: ``session_id`` (a string or an integer), optional ``turn`` (1-based)
    and ``think_s`` (seconds >= 0); None when it names no session."""
    key = meta.get("session_id")
    if key is None:
        for extra in ("turn", "think_s"):
            if extra in meta:
                raise LineError(f"'{extra}' without a 'session_id'")
        return None
    if isinstance(key, bool) or not isinstance(key, str | int) or key == "":
        raise LineError("'session_id' must be a non-empty string or an integer")
    turn = meta.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 1):
        raise LineError("'turn' must be an integer >= 1")
    return SessionMark(str(key), turn, think_of(meta))


def think_of(meta: dict[str, Any]) -> float:
    """A turn's recorded think time, ``think_s`` (0 when absent)."""
    think = meta.get("think_s", 0.0)
    if isinstance(think, bool) or not isinstance(think, int | float) or not 0 <= think < 86400:
        raise LineError("'think_s' must be a number of seconds >= 0")
    return float(think)
