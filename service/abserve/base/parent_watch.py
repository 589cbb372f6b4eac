"""Children of ``abserve run`` that stop when it is gone: the watch on a parent process.

``abserve run`` starts the router, the Locust load and the managed vLLM arms in sessions of
their own (so Ctrl-C reaches only the run, which stops them in order). If the run itself is
killed with SIGKILL it cannot stop them: they would live on as orphans, and the router would
keep the run ``running`` in the store and, on a later clean stop, mark it ``completed``: a
run cut short would look complete. So each of them is told the run's pid (the router in
its settings, ``parent_pid``; the load and the arms in ``PARENT_PID_ENV``) and watches it:
the parent is gone when this process's parent pid is no longer that pid (an orphan is
re-parented to init or a subreaper) or that pid no longer exists. What to do then is the
watcher's caller's: the router drains and marks its run ``interrupted``
(``router.app``, ``router.workers``); the load and the arms terminate themselves
(``stop_group_when_orphaned``).

Only a direct child of the parent watches (``watch_from_env``): a grandchild (vLLM's
engine process, a Locust worker's own children) inherits the variable but has another
parent, and is stopped by its own parent instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger("abserve.base.parent_watch")
PARENT_PID_ENV = "ABSERVE_PARENT_PID"
POLL_S = 0.5  # how often the parent is looked at: one getppid and one kill(pid, 0)


def parent_gone(parent_pid: int) -> bool:
    """Whether ``parent_pid`` is no longer this process's living parent."""
    if os.getppid() != parent_pid:
        return True
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else: not ours to judge
        return False
    return False


async def watch_parent(parent_pid: int, on_gone: Callable[[], None], poll_s: float = POLL_S) -> None:
    """Call ``on_gone`` once, when ``parent_pid`` is gone (an asyncio task's body)."""
    while not parent_gone(parent_pid):
        await asyncio.sleep(poll_s)
    log.warning("parent process %d is gone (abserve run was killed): stopping", parent_pid)
    on_gone()


def watch_in_thread(parent_pid: int, on_gone: Callable[[], None], poll_s: float = POLL_S) -> threading.Thread:
    """The same watch in a daemon thread (for processes without an event loop of ours)."""
    def loop() -> None:
        while not parent_gone(parent_pid):
            time.sleep(poll_s)
        log.warning("parent process %d is gone (abserve run was killed): stopping", parent_pid)
        on_gone()

    thread = threading.Thread(target=loop, name="abserve-parent-watch", daemon=True)
    thread.start()
    return thread


def terminate_self() -> None:
    """SIGTERM this process's group when it leads one (a session ``abserve run`` started),
    else this process: every process of it stops as on an ordinary SIGTERM."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


def parent_from_env() -> int | None:
    """``PARENT_PID_ENV`` when this process is that pid's direct child; None otherwise (not
    set, not a number, or a grandchild that inherited it)."""
    raw = os.environ.get(PARENT_PID_ENV, "")
    if not raw.isdigit() or int(raw) != os.getppid():
        return None
    return int(raw)


def stop_group_when_orphaned() -> threading.Thread | None:
    """In a process ``abserve run`` started with ``PARENT_PID_ENV``: SIGTERM its own process
    group once the run is gone (``terminate_self``). Nothing when it is not such a child."""
    parent = parent_from_env()
    return None if parent is None else watch_in_thread(parent, terminate_self)
