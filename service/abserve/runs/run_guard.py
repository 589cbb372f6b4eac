"""What guards one ``abserve run`` on a machine: one run at a time (a file lock), and SIGTERM
treated as Ctrl-C so that the same clean-up (every server stopped, the run marked
interrupted) runs for both."""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from abserve.arms.run_paths import RunRefused

LOCK_ENV = "ABSERVE_RUN_LOCK"  # the lock file's path (default: abserve-run.lock in the temp dir)


@contextmanager
def exclusive_run(lock_path: Path | None = None) -> Iterator[None]:
    """Refuse a second ``abserve run`` on this machine while one is running. The lock is
    one absolute path for the machine (``run_lock_path``), whatever the working directory."""
    lock_path = lock_path or run_lock_path()
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunRefused(
                f"another abserve run is in progress ({holder}); wait for it or stop it") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield


def run_lock_path() -> Path:
    """``$ABSERVE_RUN_LOCK`` when set, else ``abserve-run.lock`` in the temp directory; absolute."""
    configured = os.environ.get(LOCK_ENV)
    return Path(configured or Path(tempfile.gettempdir()) / "abserve-run.lock").resolve()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so the same clean-up runs for both.

    SIGINT gets Python's own handler back even when the run was started with SIGINT ignored
    (a shell starts background jobs that way): a run must stay interruptible."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
