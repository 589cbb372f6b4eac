"""A run stays interruptible: SIGINT and SIGTERM raise KeyboardInterrupt inside
``sigterm_as_interrupt`` even when the process was started with SIGINT ignored (a shell starts
background jobs that way; such a run could not be stopped with Ctrl-C or ``kill -INT``)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # each test runs a run in a child process

CHILD = """
import os, signal, time
from abserve.runs.run_guard import sigterm_as_interrupt
with sigterm_as_interrupt():
    try:
        os.kill(os.getpid(), signal.{name})
        time.sleep(5)
    except KeyboardInterrupt:
        print("interrupted")
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signals_interrupt_a_run_started_with_sigint_ignored(name: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD.format(name=name)], capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                          check=False)
    assert done.stdout.strip() == "interrupted", done.stderr
