"""The sessions of a traffic file, checked as the file is read: order, grouping, shared prefixes.

A session's turns are consecutive items of the file, turn 1 first (sort a gateway's log by
session, sessions in the order of their first turn): memory stays flat in the file's length
and a session can be handed to one user whole. ``SessionTracker.place`` is given every turn
in file order and refuses (``LineError``: the caller adds file and line) a session whose
turns are out of order (``turn`` numbers not 1, 2, 3...), one whose id comes back after
another session's lines, and every later turn of a session whose earlier turn was refused
(``refuse``). It names the session (``turns.session_name``), numbers the turn and says
whether the prompt begins with content an earlier request of the file sent (``shared``:
turn >= 2, or a first message, e.g. a system prompt, seen before). The sample keeps or drops
a session whole, by the line of its first turn (``first_line``).
"""

from __future__ import annotations

from typing import Any

from abserve.traffic.sources.imported import Imported, LineError
from abserve.traffic.sources.prepare import SamplingRefused
from abserve.traffic.turns import Turn, prefix_key, session_name

COMPLETION_PREFIX_CHARS = 256  # a completions prompt's leading content (its shared prefix)


class SessionTracker:
    """Walks one pass of a file's requests in order (see the module docstring)."""

    def __init__(self) -> None:
        self._key: str | None = None  # the session being read
        self._name = ""
        self.first_line = 0  # the line of its first turn
        self._turn = 0  # its last turn placed
        self._broken = False  # one of its turns was refused
        self._sampling = False  # ... for asking for sampling the router refuses
        self._ended: set[bytes] = set()  # digests of the sessions already read
        self._prefixes: set[bytes] = set()  # digests of the leading content sent so far
        self.sessions = 0  # sessions whose first turn was placed

    def place(self, imp: Imported) -> Turn:
        """The turn ``imp`` is (its ``session`` set), or ``LineError``."""
        mark = imp.session
        if mark is None:
            raise ValueError("place() is for the turns of a session")
        key = mark.key or f"\0line {imp.line}"  # a conversation without an id: its own line
        if key != self._key:
            self._start(key, imp.line)
        if self._broken:
            refused = SamplingRefused if self._sampling else LineError
            raise refused(f"an earlier turn of session {self._name} was refused")
        expected = self._turn + 1
        if mark.turn is not None and mark.turn != expected:
            self._broken = True
            where = "starts at" if expected == 1 else f"has turn {self._turn}, then"
            raise LineError(f"session {self._name} {where} turn {mark.turn}: turns out of order "
                            "(a session's turns are consecutive lines, turn 1 first)")
        self._turn = expected
        shared = expected > 1 or self.seen(imp)
        return Turn(self._name, expected, mark.think_s if expected > 1 else 0.0, shared)

    def _start(self, key: str, line: int) -> None:
        if self._key is not None:
            self._ended.add(prefix_key(self._key))
        digest = prefix_key(key)
        name = session_name(key, line)
        if digest in self._ended:
            self._key, self._name, self._broken = None, name, True
            raise LineError(f"session {name} comes back after other sessions' lines (a "
                            "session's turns are consecutive lines: sort the file by session)")
        self._key, self._name, self.first_line = key, name, line
        self._turn, self._broken, self._sampling = 0, False, False
        self.sessions += 1

    def end(self) -> None:
        """A request of no session: the session being read has ended."""
        if self._key is not None:
            self._ended.add(prefix_key(self._key))
        self._key = None

    def refuse(self, sampling: bool = False) -> None:
        """The turn just placed cannot be sent (``sampling``: it asks for sampling the router
        refuses): the rest of its session is refused too, for the same reason."""
        self._broken = True
        self._sampling = self._sampling or sampling

    def seen(self, imp: Imported) -> bool:
        """Whether ``imp``'s leading content was sent before (and note it as sent)."""
        digest = prefix_key(leading(imp.body, imp.endpoint))
        if digest in self._prefixes:
            return True
        self._prefixes.add(digest)
        return False


def leading(body: dict[str, Any], endpoint: str) -> object:
    """A request's leading content: a chat's first message, a completions prompt's start."""
    if endpoint == "completions":
        prompt = body.get("prompt")
        return prompt[:COMPLETION_PREFIX_CHARS] if isinstance(prompt, str) else prompt
    messages = body.get("messages")
    return messages[0] if isinstance(messages, list) and messages else None
