"""Replay a checked traffic file: which requests a load process sends, in what order, when.

A run (or one block of it) sends a window of the file's accepted requests: ``limit`` of them
from the ``skip``-th on, wrapping around to the first when the file is shorter. Request ``j``
of the window goes to worker ``j % shards``. Its planned offset is its recorded arrival less
the window's first, times ``time_scale`` (0.5: twice as fast); a line without an arrival, or
one recorded before the latest so far (a log slightly out of order), is sent at the latest
offset so far (never earlier than a line before it), so a file without times is sent as fast
as the in-flight cap (the load's users) lets it. A window that wraps around to the file's
start goes on from its offset at that point. Nothing is read ahead: each request
is read, its images inlined, when a user asks for it.

A file with sessions (``FileSource.checked_sessions``) is replayed by sessions instead
(``session_window``, ``SessionStream``): the window's requests grouped into units (a
session's consecutive turns, or one request of no session), unit ``u`` going to worker
``u % shards``, each at the offset of its first request as above; a user sends a unit's
turns one after another (``abserve.traffic.run_state.SessionRunState``). A window that
begins or ends inside a session sends the part of it inside the window.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from abserve.traffic.corpus import CorpusEntry
from abserve.traffic.sources.reader import Accepted, accepted
from abserve.traffic.sources.spec import FileSource, RequestsFileError
from abserve.traffic.turns import follows


class _Clock:
    """Planned offsets from recorded arrivals (the module docstring's rule)."""

    def __init__(self, time_scale: float) -> None:
        self.scale, self.offset, self.last_index = time_scale, 0.0, -1
        self.latest: float | None = None

    def at(self, item: Accepted) -> float:
        if item.entry.index < self.last_index:  # wrapped around to the file's start: a new pass
            self.latest = None
        self.last_index = item.entry.index
        if item.arrival is not None:
            if self.latest is not None and item.arrival > self.latest:
                self.offset += (item.arrival - self.latest) * self.scale
            self.latest = item.arrival if self.latest is None else max(self.latest, item.arrival)
        return self.offset


def window(src: FileSource, total: int, shard: int = 0,
           shards: int = 1) -> Iterator[tuple[CorpusEntry, float]]:
    """This worker's requests of the window, each with its planned offset in seconds."""
    clock = _Clock(src.time_scale)
    for j, item in enumerate(_requests(src, total)):
        offset = clock.at(item)
        if j % shards == shard:
            yield item.entry, offset


@dataclass(frozen=True)
class Unit:
    """What one user sends in a row: a session's turns (or one request of no session), and
    the planned offset of the first."""

    entries: tuple[CorpusEntry, ...]
    offset: float


def session_window(src: FileSource, total: int, shard: int = 0,
                   shards: int = 1) -> Iterator[Unit]:
    """This worker's units of the window (the module docstring)."""
    clock = _Clock(src.time_scale)
    for u, group in enumerate(_units(_requests(src, total))):
        offset = clock.at(group[0])
        if u % shards == shard:
            yield Unit(tuple(item.entry for item in group), offset)


def _requests(src: FileSource, total: int) -> Iterator[Accepted]:
    """The window's accepted requests, in order."""
    count = src.limit or total
    for j, item in enumerate(_cycle(src, total, src.skip % total)):
        if j >= count:
            return
        yield item


def _units(items: Iterator[Accepted]) -> Iterator[list[Accepted]]:
    """Consecutive requests grouped: a session's next turn joins the unit of the one before."""
    group: list[Accepted] = []
    for item in items:
        if group and not _follows(group[-1].entry, item.entry):
            yield group
            group = []
        group.append(item)
    if group:
        yield group


def _follows(before: CorpusEntry, entry: CorpusEntry) -> bool:
    """Whether ``entry`` is the turn right after ``before`` in the same session."""
    return follows(before.turn, entry.turn) and entry.index == before.index + 1


def _cycle(src: FileSource, total: int, start: int) -> Iterator[Accepted]:
    """Accepted requests from ordinal ``start`` on, wrapping around (endless)."""
    while True:
        seen = 0
        for item in accepted(src):
            if not isinstance(item, Accepted):
                if src.skip_invalid and not item.sampling:
                    continue
                raise RequestsFileError(f"{src.path}:{item.line}: {item.reason} (the file "
                                        "changed since it was checked)")
            seen += 1
            if item.entry.index >= start:
                yield item
        if seen != total:
            raise RequestsFileError(f"{src.path}: {seen} requests now, {total} when checked "
                                    "(the file changed during the run)")
        start = 0


class StreamedEntries(Sequence[CorpusEntry]):
    """A worker's window as a sequence read strictly in order: item ``k`` is asked for once,
    after item ``k - 1`` (``RunState`` hands requests out one by one, under its lock)."""

    def __init__(self, src: FileSource, total: int, shard: int, shards: int) -> None:
        count = src.limit or total
        self._size = len(range(shard, count, shards))
        self._items = window(src, total, shard, shards)
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, k: int) -> CorpusEntry: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[CorpusEntry]: ...

    def __getitem__(self, k: int | slice) -> CorpusEntry | Sequence[CorpusEntry]:
        if isinstance(k, slice):
            raise IndexError("a streamed traffic file is read in order, one request at a time")
        return self.next_item(k)[0]

    def next_item(self, k: int) -> tuple[CorpusEntry, float]:
        """Request ``k`` of this worker's window and its planned offset (seconds)."""
        with self._lock:
            if k != self._next:
                raise IndexError("a streamed traffic file is read in order, one request at a time")
            self._next += 1
            try:
                return next(self._items)
            except StopIteration:
                raise RequestsFileError("the traffic file ended early (it changed since it was "
                                        "checked)") from None


def block_skip(shares: Sequence[int], index: int) -> int:
    """Accepted requests the blocks before block ``index`` sent (block ``k`` sends
    ``shares[k % len(shares)]``), so consecutive blocks send consecutive parts of a file."""
    return sum(shares[k % len(shares)] for k in range(index))


class SessionStream:
    """A worker's units of the window, read strictly in order (``RunState`` asks under its
    lock); ``len`` is this worker's share of the window's requests, an estimate (a worker's
    sessions may hold more or fewer turns than another's)."""

    def __init__(self, src: FileSource, total: int, shard: int, shards: int) -> None:
        count = src.limit or total
        self._size = len(range(shard, count, shards))
        self._units = session_window(src, total, shard, shards)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    def next_unit(self) -> Unit | None:
        """The next unit, or None when this worker's part of the window is sent."""
        with self._lock:
            return next(self._units, None)


class UnitList:
    """A generated profile's units (its sessions), handed out in order (over and over, with
    ``cycle``: a run bounded by its duration)."""

    def __init__(self, units: list[Unit], cycle: bool = False) -> None:
        self._units, self._next, self._lock, self.cycle = units, 0, threading.Lock(), cycle
        self._size = sum(len(unit.entries) for unit in units)

    def __len__(self) -> int:
        return self._size

    def next_unit(self) -> Unit | None:
        with self._lock:
            if self._next >= len(self._units) and not (self.cycle and self._units):
                return None
            self._next += 1
            return self._units[(self._next - 1) % len(self._units)]
