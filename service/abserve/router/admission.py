"""Admission across router workers: one set of limits for the router as a whole.

A router process admits a client while fewer than ``max_concurrency`` clients are being
answered and fewer than ``max_shadow_backlog`` exchanges still wait for an arm after their
client was answered (``app._admit``): two counts it keeps for itself. Several workers
(``router.workers``) also publish their two counts in their own slot of a small file that
every worker maps into memory (``SharedCounts``), and admit against the sums over all
slots, read and taken under an exclusive ``flock`` of the file. So the router as a whole
never holds more than its limits, and no worker refuses a client while the router has room
(with per-worker shares of the limits, the kernel's spreading of connections over workers
decided who was refused). A worker writes only its own slot; a restarted worker zeroes its
predecessor's, whose clients and exchanges died with it.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SLOT = struct.Struct("<qq")  # clients being answered, exchanges in flight


def create_counts(path: Path, workers: int) -> None:
    """The shared file of ``workers`` slots, all zero."""
    path.write_bytes(bytes(_SLOT.size * workers))


class SharedCounts:
    """Worker ``index``'s view of the shared file: its own slot and the sums of all."""

    def __init__(self, path: Path, index: int) -> None:
        self._fd = os.open(path, os.O_RDWR)
        size = os.fstat(self._fd).st_size
        if size < _SLOT.size * (index + 1) or size % _SLOT.size:
            os.close(self._fd)
            raise ValueError(f"{path}: no slot {index} in a file of {size} bytes")
        self._map = mmap.mmap(self._fd, size)
        self._offset = index * _SLOT.size
        self.publish(0, 0)

    def publish(self, answering: int, in_flight: int) -> None:
        """Set this worker's counts (the other workers see them at their next admission)."""
        _SLOT.pack_into(self._map, self._offset, answering, in_flight)

    def totals(self) -> tuple[int, int]:
        """Clients being answered and exchanges in flight, summed over every worker."""
        answering = in_flight = 0
        for slot_answering, slot_in_flight in _SLOT.iter_unpack(self._map):
            answering += slot_answering
            in_flight += slot_in_flight
        return answering, in_flight

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file's exclusive lock: no other worker admits meanwhile."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
