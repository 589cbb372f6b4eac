"""When a ``running`` run is really ``interrupted``: dead owner, reused PID, stale heartbeat."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import update
from tests.support.records_factory import full_run_info as run_info

from abserve.store import Store
from abserve.store.owner import Owner, effective_status, owner_alive
from abserve.store.schema import runs_table

HOST = socket.gethostname()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.process
def test_owner_alive() -> None:
    me = Owner.current()
    assert owner_alive(me, HOST) is True
    assert owner_alive(Owner(HOST, me.pid, None), HOST) is True
    assert owner_alive(Owner(HOST, me.pid, (me.started or 0) - 100), HOST) is False  # PID reused
    assert owner_alive(Owner(HOST, _dead_pid(), None), HOST) is False
    assert owner_alive(Owner("elsewhere", me.pid, me.started), HOST) is None


@pytest.mark.parametrize(
    ("stored", "owner_host", "age", "expected"),
    [
        ("completed", "dead", 1000.0, "completed"),
        ("interrupted", "me", 0.0, "interrupted"),
        ("running", "me", 0.0, "running"),
        ("running", "me", 11.0, "interrupted"),  # alive but no longer flushing
        ("running", "dead", 0.0, "interrupted"),
        ("running", "elsewhere", 0.0, "running"),
        ("running", "elsewhere", 11.0, "interrupted"),
    ],
)
@pytest.mark.process
def test_effective_status(stored: str, owner_host: str, age: float, expected: str) -> None:
    owners = {
        "me": Owner.current(),
        "dead": Owner(HOST, _dead_pid(), None),
        "elsewhere": Owner("elsewhere", 1, None),
    }
    now = time.time()
    status = effective_status(
        stored,  # type: ignore[arg-type]
        owners[owner_host],
        heartbeat_at=now - age,
        now=now,
        stale_after_s=10.0,
        this_host=HOST,
    )
    assert status == expected


def _set(store: Store, **values: object) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(runs_table).where(runs_table.c.run_id == "r1").values(**values))


def _status(store: Store) -> str:
    run = store.get_run("r1")
    assert run is not None
    return run.status


@pytest.mark.process
def test_store_reports_interrupted_runs(store: Store) -> None:
    store.create_run(run_info("r1"))
    assert _status(store) == "running"
    _set(store, heartbeat_at=time.time() - store.stale_after_s - 1)
    assert _status(store) == "interrupted"
    assert [r.status for r in store.list_runs()] == ["interrupted"]
    store.heartbeat("r1")
    assert _status(store) == "running"
    _set(store, owner_pid=_dead_pid(), owner_started=None)
    assert _status(store) == "interrupted"
    store.finish_run("r1", "completed")
    assert _status(store) == "completed"


def test_stale_after_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stale_after_s"):
        Store.open(f"sqlite:///{tmp_path}/r.db", stale_after_s=0)
