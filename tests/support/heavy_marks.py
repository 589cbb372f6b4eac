"""Keeps the heavy-test markers honest: a test that starts a process or a server says so.

``make test-fast`` selects tests by marker, so a test that quietly started a child process
or a server would slow the edit-run loop and nobody would notice. This pytest plugin
(loaded by ``tests/conftest.py``) watches each test's setup, call and teardown. Starting a
child process (``subprocess.Popen``, which asyncio subprocesses use too, ``multiprocessing``,
``os.fork``, ``os.posix_spawn``, ``os.system``) needs a heavy marker (``process`` will do);
starting a server (a socket that listens, or a uvicorn server, whose uvloop listens in C
below ``socket.listen``) needs ``server`` or another marker ``make test-fast`` leaves out.
A test whose markers do not cover what it started fails, in one line naming the marker.
A module- or session-scoped fixture that started something makes every test using it
heavy, not only the first (its teardown, run by whichever test ends its scope, is not
counted). Tests under ``HEAVY_FOLDERS`` are heavy by folder: they get ``server`` at
collection. Reading ``/proc`` or ``os.cpu_count()`` starts nothing and is never flagged.
The watch costs a flag check per start: nothing measurable.
"""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import uvicorn

PROCESS = "process"  # starts a short child process; stays in make test-fast
SERVER = "server"  # starts a listening server (or a process that serves); not in test-fast
HEAVY_MARKERS = (PROCESS, SERVER, "vllm", "postgres", "browser", "compose")
HEAVY_FOLDERS = ("integration", "e2e", "compose_stack")  # under tests/
TESTS_ROOT = Path(__file__).resolve().parents[1]


class Start(NamedTuple):
    """Something a test started: the marker it needs, and what it was, in words."""

    marker: str
    what: str


Describe = Callable[..., Start]


@dataclass
class Watch:
    """What the running test phase started (the first server, else the first child process),
    and the wide fixtures known to start something."""

    armed: bool = False
    paused: int = 0  # inside the teardown of a fixture wider than one test
    started: Start | None = None
    heavy_fixtures: dict[tuple[str, str], Start] = field(default_factory=dict)

    def saw(self, describe: Describe, *args: Any, **kwargs: Any) -> None:
        if self.armed and not self.paused and (self.started is None or self.started.marker == PROCESS):
            self.started = stronger(self.started, describe(*args, **kwargs))

    def take(self) -> Start | None:
        started, self.started = self.started, None
        return started


def stronger(first: Start | None, second: Start | None) -> Start | None:
    """The one that needs the stronger marker (a server over a child process); else the first."""
    if first is None or (first.marker == PROCESS and second is not None and second.marker == SERVER):
        return second
    return first


WATCH = Watch()


def _child(what: str) -> Start:
    return Start(PROCESS, f"a child process ({what})")


def _popen(self: Any, args: Any, *rest: Any, **kwargs: Any) -> Start:
    words = [str(word) for word in args] if isinstance(args, list | tuple) else [str(args)]
    command = " ".join(" ".join(words).split())  # one line, whatever a script holds
    return _child(command[:77] + "..." if len(command) > 80 else command)


def _multiprocessing(self: Any) -> Start:
    return _child(f"multiprocessing {type(self).__name__}")


def _os_call(name: str) -> Describe:
    return lambda *args, **kwargs: _child(f"os.{name}")


def _listen(self: socket.socket, *args: Any) -> Start:
    try:
        where = self.getsockname()
    except OSError:
        where = "?"
    return Start(SERVER, f"a server (listens on {where})")


def _uvicorn(self: uvicorn.Server, *args: Any, **kwargs: Any) -> Start:
    return Start(SERVER, f"a server (uvicorn on {self.config.host}:{self.config.port})")


def starters() -> list[tuple[Any, str, Describe]]:
    """(owner, attribute, describe): every way a test could start a process or a server."""
    found: list[tuple[Any, str, Describe]] = [
        (subprocess.Popen, "__init__", _popen),
        (multiprocessing.process.BaseProcess, "start", _multiprocessing),
        (socket.socket, "listen", _listen),
        (uvicorn.Server, "startup", _uvicorn),
    ]
    names = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")
    return found + [(os, name, _os_call(name)) for name in names if hasattr(os, name)]


def _watched(original: Callable[..., Any], describe: Describe) -> Callable[..., Any]:
    def watched(*args: Any, **kwargs: Any) -> Any:
        WATCH.saw(describe, *args, **kwargs)
        return original(*args, **kwargs)

    return watched


def install() -> Callable[[], None]:
    """Wraps every starter; returns the function that puts the originals back."""
    saved = [(owner, name, vars(owner).get(name)) for owner, name, _ in starters()]
    for owner, name, describe in starters():
        setattr(owner, name, _watched(getattr(owner, name), describe))

    def restore() -> None:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)  # it was inherited (socket.socket.listen)
            else:
                setattr(owner, name, original)

    return restore


def heavy_by_folder(path: Path) -> bool:
    """Whether a test file lives in a folder whose tests all start servers or processes."""
    try:
        parts = path.resolve().relative_to(TESTS_ROOT).parts
    except ValueError:
        return False
    return len(parts) > 1 and parts[0] in HEAVY_FOLDERS


def is_marked_for(item: pytest.Item, started: Start) -> bool:
    """Whether the item carries a marker that covers what it started (``process`` does
    not cover a server: it would keep the test in ``make test-fast``)."""
    enough = HEAVY_MARKERS if started.marker == PROCESS else HEAVY_MARKERS[1:]
    return any(item.get_closest_marker(name) is not None for name in enough)


def missing_marker(nodeid: str, when: str, started: Start, fixture: str | None = None) -> str:
    """The one line that fails a test which started something its markers do not cover."""
    how = f"uses fixture {fixture!r}, which started" if fixture else "starts"
    hint = " (server if the child serves)" if started.marker == PROCESS else ""
    return (f"{nodeid} {how} {started.what} during {when} but is not marked: add "
            f"@pytest.mark.{started.marker}{hint}; see tests/support/heavy_marks.py")


def _heavy_fixture(item: pytest.Item) -> tuple[str, Start] | None:
    """A wide fixture the item uses that started something (a server first), whichever
    earlier test set it up."""
    names = set(getattr(item, "fixturenames", ()))
    found = [(name, started) for (name, baseid), started in WATCH.heavy_fixtures.items()
             if name in names and item.nodeid.startswith(baseid)]
    return max(found, key=lambda pair: pair[1].marker == SERVER, default=None)


def _pause() -> None:
    WATCH.paused += 1


def _resume() -> None:
    WATCH.paused -= 1


def pytest_configure(config: pytest.Config) -> None:
    config.add_cleanup(install())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if heavy_by_folder(item.path):
            item.add_marker(SERVER)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Generator[None, Any, Any]:
    wide = fixturedef.scope != "function"
    if wide:
        fixturedef.addfinalizer(_resume)  # finalizers run last-in first-out: this one last
    before, WATCH.started = WATCH.started, None
    try:
        return (yield)
    finally:
        started = WATCH.started
        if wide:
            fixturedef.addfinalizer(_pause)  # runs before the fixture's own teardown
            if started is not None:
                WATCH.heavy_fixtures[(fixturedef.argname, fixturedef.baseid)] = started
        WATCH.started = stronger(before, started)


def _phase() -> Generator[None, Any, Any]:
    WATCH.started, WATCH.armed = None, True
    try:
        return (yield)
    finally:
        WATCH.armed = False


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    started, fixture = WATCH.take(), None
    found = _heavy_fixture(item) if call.when == "setup" else None
    if found is not None and stronger(started, found[1]) is not started:
        fixture, started = found
    if started is not None and report.passed and not is_marked_for(item, started):
        report.outcome = "failed"
        report.longrepr = missing_marker(item.nodeid, call.when, started, fixture)
    return report
