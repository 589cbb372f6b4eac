"""Crash safety, for real: SIGKILL a process mid-write and inspect what it left.

A child process writes exchanges through ``BatchWriter`` (flushing every 50 ms) and prints
how many were committed; the parent kills it with SIGKILL at an arbitrary moment, then
opens the store and checks: the database is intact (SQLite ``integrity_check``), every
acknowledged exchange is there, the stored exchanges are exactly a prefix of what was put
(batches commit whole and in order: nothing torn, nothing out of order), every record
reads back, and the run is reported ``interrupted``.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import make_url

from abserve.store import Store

pytestmark = pytest.mark.process  # a child process writes and is killed

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.unit.store.crash_writer"


def _kill_while_writing(database_url: str, run_id: str, min_acked: int, seed: int) -> int:
    """Run the child until it acknowledged ``min_acked`` exchanges, SIGKILL it, return acks."""
    proc = subprocess.Popen(
        [sys.executable, "-m", CHILD, database_url, run_id],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            acked = int(line.split()[1])
            if acked >= min_acked or time.monotonic() > deadline:
                break
        time.sleep(random.Random(seed).uniform(0.0, 0.08))  # land anywhere in a flush cycle
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert acked >= min_acked, "child never acknowledged enough exchanges"
    return acked


def _check_after_kill(database_url: str, run_id: str, acked: int) -> None:
    with Store.open(database_url) as store:
        run = store.get_run(run_id)
        assert run is not None
        assert run.status == "interrupted"
        count = store.count_exchanges(run_id)
        assert count >= acked
        got = list(store.iter_exchanges(run_id))
        assert len(got) == count
        assert sorted(e.request_id for e in got) == [f"req-{i:06d}" for i in range(count)]


def _sqlite_integrity(database_url: str) -> None:
    path = make_url(database_url).database
    assert path is not None
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_sigkill_loses_at_most_the_last_flush(backend_url: str) -> None:
    for round_no in range(2):  # the second writer reuses a store the first left behind
        run_id = f"crash-{round_no}"
        acked = _kill_while_writing(backend_url, run_id, min_acked=150, seed=round_no)
        if backend_url.startswith("sqlite"):
            _sqlite_integrity(backend_url)
        _check_after_kill(backend_url, run_id, acked)
