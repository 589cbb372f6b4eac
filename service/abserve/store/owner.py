"""Who is writing a run, and whether that writer is still alive.

A run is ``running`` in the database from ``create_run`` until ``finish_run``. If the
writing process dies without finishing (SIGKILL, OOM, power cut), nobody updates the row,
so readers derive the *effective* status: a ``running`` run is ``interrupted`` when

- its owner process is on this host and is gone (PID absent, or reused by a process that
  started at another time than the recorded owner), or
- its heartbeat is older than ``stale_after_s`` (owner on another host, or alive but no
  longer flushing: a hung or closed writer).

The heartbeat is wall-clock time, refreshed by the ``BatchWriter`` at least every
``flush_interval_s`` (with a commit of exchanges, or alone when none came), so
``stale_after_s`` should be many flush intervals; across hosts it must also exceed the
clocks' skew.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

import psutil

RunStatus = Literal["running", "completed", "interrupted"]


@dataclass(frozen=True)
class Owner:
    """A process identity that survives PID reuse: host, PID and the process start time."""

    host: str
    pid: int
    started: float | None

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(host=socket.gethostname(), pid=pid, started=_create_time(pid))


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def owner_alive(owner: Owner, this_host: str) -> bool | None:
    """True/False when it can be known from here; None for an owner on another host."""
    if owner.host != this_host:
        return None
    try:
        proc = psutil.Process(owner.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = float(proc.create_time())
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # exists, owned by someone else: cannot prove it is another process
    if owner.started is None:
        return True
    return abs(started - owner.started) < 0.01


def effective_status(
    stored: RunStatus,
    owner: Owner,
    heartbeat_at: float,
    now: float,
    stale_after_s: float,
    this_host: str,
) -> RunStatus:
    """The status a reader should believe (see the module docstring)."""
    if stored != "running":
        return stored
    if owner_alive(owner, this_host) is False:
        return "interrupted"
    if now - heartbeat_at > stale_after_s:
        return "interrupted"
    return "running"
