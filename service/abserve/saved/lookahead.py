"""Join a stream of records to a second stream by key, holding only what arrives out of order.

AIPerf writes its per-request export in completion order and its ``inputs.json`` /
``outputs.json`` in session order: nearly the same order (they differ by at most the requests
in flight). ``Lookahead.take(key)`` reads the second stream until ``key`` comes by, keeps what
it passed on the way, and forgets each entry once taken, so memory follows the disorder, not
the file (a key that never comes reads the stream to its end once).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lookahead(Generic[K, V]):
    """Values of ``pairs`` taken by key, each at most once."""

    def __init__(self, pairs: Iterator[tuple[K, V]]) -> None:
        self._pairs: Iterator[tuple[K, V]] | None = pairs
        self._held: dict[K, V] = {}

    def take(self, key: K) -> V | None:
        if key in self._held:
            return self._held.pop(key)
        while self._pairs is not None:
            try:
                found, value = next(self._pairs)
            except StopIteration:
                self._pairs = None
                break
            if found == key:
                return value
            self._held[found] = value
        return None

    @property
    def held(self) -> int:
        """How many entries wait for their key (what the join costs in memory)."""
        return len(self._held)
