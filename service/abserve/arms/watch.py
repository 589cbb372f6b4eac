"""Watch the arms while a run sends load: each server's process and its ``/health``.

A vLLM engine that dies (a crash in the model runner, the OOM killer, a stray ``kill``)
leaves the router answering errors for every later request; without a watch the run went
on until its load ended and was only found invalid at the end, without the cause. Here a
thread polls every arm every ``interval_s``: the server's process (an exit is a death at
once) and ``GET /health`` (vLLM answers 503 once its engine is dead: two such answers in a
row are a death; no answer at all for ``unresponsive_s`` is one too). The first death is
kept as an ``ArmDeath`` (arm, cause, first error line its log gained since the watch
started) and ``on_death`` is called once, from the watch's thread.

``watch_arms`` is the orchestrator's use: it turns a death into ``ArmDied`` raised in the
main thread (a real signal, so a blocking wait on the load's process is interrupted too),
so the load stops within about a second of the death.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

import httpx

from abserve.model.provenance import ArmDeathRecord

# A log line that says what went wrong: vLLM's ERROR level, or an exception's own line
# ("RuntimeError: ..."); "Traceback (most recent call last):" names nothing and is skipped.
_ERROR_LINE = re.compile(r"\bERROR\b|\b[A-Z]\w*(?:Error|Exception|Exit)\b:")
MAX_LINE = 300


class WatchedServer(Protocol):
    """What the watch needs of an arm (``launch.server.VllmServer`` has it)."""

    name: str
    log_path: Path
    process: subprocess.Popen[bytes] | None

    @property
    def url(self) -> str: ...


@dataclass(frozen=True)
class ArmDeath:
    """An arm found dead: which, why, and the first error line of its log (if any)."""

    arm: str
    cause: str
    log_line: str | None
    at: float  # Unix time it was found

    def describe(self) -> str:
        line = f"; first error line of its log: {self.log_line}" if self.log_line else \
            "; its log has no error line"
        return f"arm {self.arm!r} died during the run: {self.cause}{line}"

    def as_provenance(self) -> ArmDeathRecord:
        return ArmDeathRecord(arm=self.arm, cause=self.cause, log_line=self.log_line, at=self.at,
                              reason=self.describe())


class ArmDied(RuntimeError):
    """Raised in the main thread by ``watch_arms`` when an arm dies."""

    def __init__(self, death: ArmDeath) -> None:
        super().__init__(death.describe())
        self.death = death


def exit_cause(code: int) -> str:
    """An exit code in words (a negative code is the signal that ended the process)."""
    if code < 0:
        try:
            return f"its process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"its process was killed by signal {-code}"
    return f"its process exited with code {code}"


def first_error_line(text: str) -> str | None:
    """The first line of ``text`` that reports an error, trimmed; None when there is none."""
    for line in text.splitlines():
        if _ERROR_LINE.search(line):
            line = line.strip()
            return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "..."
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _log_since(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(4 << 20).decode(errors="replace")
    except OSError:
        return ""


@dataclass
class _ArmState:
    server: WatchedServer
    log_offset: int
    bad_answers: int = 0
    silent_since: float | None = None


@dataclass
class ArmWatch:
    """Polls every arm until ``stop``; ``death`` is the first arm found dead."""

    servers: Mapping[str, WatchedServer]
    on_death: Callable[[ArmDeath], None] = lambda death: None
    interval_s: float = 0.5
    health_timeout_s: float = 2.0
    bad_answers: int = 2  # consecutive non-200 answers of /health
    unresponsive_s: float = 8.0  # no answer at all for this long
    death: ArmDeath | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ArmWatch:
        states = {name: _ArmState(s, _size(s.log_path)) for name, s in self.servers.items()}
        self._thread = threading.Thread(target=self._run, args=(states,), name="abserve-arm-watch",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.health_timeout_s + 2)

    def _run(self, states: dict[str, _ArmState]) -> None:
        with httpx.Client(timeout=self.health_timeout_s) as client:
            while not self._stop.wait(self.interval_s):
                for name, state in states.items():
                    cause = self._check(client, state)
                    if cause is not None and not self._stop.is_set():
                        self._found(name, cause, state)
                        return

    def _check(self, client: httpx.Client, state: _ArmState) -> str | None:
        """Why the arm is dead, or None while it looks alive."""
        process = state.server.process
        code = process.poll() if process is not None else None
        if code is not None:
            return exit_cause(code)
        now = time.monotonic()
        try:
            status = client.get(f"{state.server.url}/health").status_code
        except httpx.HTTPError as exc:
            state.silent_since = state.silent_since or now
            if now - state.silent_since >= self.unresponsive_s:
                return f"no answer from /health for {self.unresponsive_s:g} s ({type(exc).__name__})"
            return None
        state.silent_since = None
        state.bad_answers = state.bad_answers + 1 if status != 200 else 0
        if state.bad_answers >= self.bad_answers:
            return f"/health answered HTTP {status} {self.bad_answers} times in a row"
        return None

    def _found(self, name: str, cause: str, state: _ArmState) -> None:
        time.sleep(0.2)  # let a dying process finish writing its last lines
        line = first_error_line(_log_since(state.server.log_path, state.log_offset))
        self.death = ArmDeath(name, cause, line, time.time())
        self.on_death(self.death)


@contextmanager
def watch_arms(servers: Mapping[str, WatchedServer], interval_s: float = 0.5) -> Iterator[ArmWatch]:
    """Watch ``servers`` for the block; an arm's death raises ``ArmDied`` in the main thread
    (call from the main thread). The signal used, SIGUSR1, is restored on exit."""

    watch = ArmWatch(servers, interval_s=interval_s)

    def raise_died(signum: int, frame: FrameType | None) -> None:
        if watch.death is not None and not watch._stop.is_set():
            watch._stop.set()  # raise once
            raise ArmDied(watch.death)

    previous = signal.signal(signal.SIGUSR1, raise_died)
    watch.on_death = lambda death: os.kill(os.getpid(), signal.SIGUSR1)
    watch.start()
    try:
        yield watch
    finally:
        watch.stop()
        signal.signal(signal.SIGUSR1, previous)
