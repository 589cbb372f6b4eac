"""Sessions: a request's place in a conversation, and the headers that say so.

A session is a conversation replayed turn by turn: turn ``k`` carries the history as recorded
(never the arms' live answers, so every arm receives identical requests) and is sent once turn
``k - 1`` has ended (on every arm: the router ends an answer after every arm did) plus its
recorded think time. Every request of a session carries three tags (``x-abserve-*`` headers,
the router's ``Exchange.tags``) and the session-affinity header:

- ``session``: the session's id (the file's, tag-safe, else ``line-N``); ``turn``: 1-based;
- ``shared-prefix``: ``yes`` when the prompt begins with content an earlier request already
  sent (turn >= 2, or a system prompt shared with an earlier session), else ``no``;
- ``x-session-id`` (``SESSION_ID_HEADER``): the session's id, which the router forwards
  unchanged to every arm (routers in front of replicas keep a session on one replica by it).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import orjson

from abserve.model.records import SESSION_ID_HEADER, TAG_HEADER_PREFIX

SESSION_TAG, TURN_TAG, SHARED_TAG = "session", "turn", "shared-prefix"
SESSION_TAGS = frozenset({SESSION_TAG, TURN_TAG, SHARED_TAG})
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


@dataclass(frozen=True)
class Turn:
    """One request's place in its session."""

    session: str  # tag-safe id
    turn: int  # 1-based
    think_s: float = 0.0  # pause after the previous turn ended, before this one (as recorded)
    shared: bool = False  # the prompt begins with content an earlier request sent

    def headers(self) -> dict[str, str]:
        """The tag headers and the affinity header of this turn's request."""
        return {f"{TAG_HEADER_PREFIX}{SESSION_TAG}": self.session,
                f"{TAG_HEADER_PREFIX}{TURN_TAG}": str(self.turn),
                f"{TAG_HEADER_PREFIX}{SHARED_TAG}": "yes" if self.shared else "no",
                SESSION_ID_HEADER: self.session}


def session_name(raw: str, line: int) -> str:
    """A session id fit for a tag and a header: the file's own when it is short plain text,
    else ``line-N`` (the line its first turn is on)."""
    return raw if _SAFE_ID.match(raw) else f"line-{line}"


def prefix_key(first: object) -> bytes:
    """A short digest of a prompt's leading content (its first message, as sorted JSON)."""
    text = orjson.dumps(first, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(text, digest_size=12).digest()


def follows(before: Turn | None, turn: Turn | None) -> bool:
    """Whether ``turn`` is the turn right after ``before`` in the same session."""
    return (before is not None and turn is not None and before.session == turn.session
            and turn.turn == before.turn + 1)
