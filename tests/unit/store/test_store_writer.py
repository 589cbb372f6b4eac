"""BatchWriter: group-committed background writes, each acknowledged once stored (its
future), heartbeat, bad use, failure handling (never an acknowledgement without a commit)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from sqlalchemy import Connection, select
from sqlalchemy.exc import OperationalError
from tests.support.records_factory import full_exchange as exchange
from tests.support.records_factory import full_run_info as run_info

from abserve.store import BatchWriter, Store
from abserve.store.rows import Row
from abserve.store.schema import runs_table
from abserve.store.writer import NotStored


def _heartbeat(store: Store, run_id: str) -> float:
    with store.engine.connect() as conn:
        value = conn.execute(
            select(runs_table.c.heartbeat_at).where(runs_table.c.run_id == run_id)
        ).scalar_one()
    return float(value)


async def test_puts_from_asyncio_tasks_are_all_written(store: Store) -> None:
    store.create_run(run_info("r1"))
    writer = BatchWriter(store, "r1", flush_interval_s=0.05)
    writer.start()

    async def client(k: int) -> None:
        for j in range(10):
            writer.put(exchange("r1", k * 10 + j))
            await asyncio.sleep(0)

    await asyncio.gather(*(client(k) for k in range(20)))
    writer.close()
    assert store.count_exchanges("r1") == 200 == writer.written
    assert writer.dropped == 0
    assert writer.queued == 0
    run = store.get_run("r1")
    assert run is not None
    assert run.status == "running"  # close marks nothing


def test_flushes_in_background_within_the_interval(store: Store) -> None:
    store.create_run(run_info("r1"))
    writer = BatchWriter(store, "r1", flush_interval_s=0.1)
    writer.start()
    try:
        writer.put(exchange("r1", 1))
        deadline = time.monotonic() + 5
        while store.count_exchanges("r1") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.count_exchanges("r1") == 1
        assert writer.flushes >= 1
    finally:
        writer.close()


def test_heartbeat_advances_without_traffic(store: Store) -> None:
    store.create_run(run_info("r1"))
    first = _heartbeat(store, "r1")
    writer = BatchWriter(store, "r1", flush_interval_s=0.05)
    writer.start()
    try:
        deadline = time.monotonic() + 5
        while _heartbeat(store, "r1") <= first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _heartbeat(store, "r1") > first
    finally:
        writer.close()


def test_bad_use_is_refused(store: Store) -> None:
    store.create_run(run_info("r1"))
    for interval in (0.0, -1.0, 1.5):
        with pytest.raises(ValueError, match="flush_interval_s"):
            BatchWriter(store, "r1", flush_interval_s=interval)
    with pytest.raises(ValueError, match="max_pending"):
        BatchWriter(store, "r1", max_pending=0)
    writer = BatchWriter(store, "r1")
    with pytest.raises(ValueError, match="run 'r2'"):
        writer.put(exchange("r2", 1))
    writer.start()
    with pytest.raises(RuntimeError, match="already started"):
        writer.start()
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        writer.put(exchange("r1", 1))


def test_full_queue_drops_and_counts(store: Store) -> None:
    store.create_run(run_info("r1"))
    writer = BatchWriter(store, "r1", max_pending=2)  # not started: nothing drains
    for i in range(3):
        writer.put(exchange("r1", i))
    assert writer.dropped == 1
    writer.close()
    assert store.count_exchanges("r1") == 2 == writer.written


def test_refused_rows_are_dropped_alone(store: Store) -> None:
    store.create_run(run_info("r1"))
    store.write_exchanges([exchange("r1", 2)])
    writer = BatchWriter(store, "r1")
    for i in range(4):  # request 2 already stored: the batch fails as a whole
        writer.put(exchange("r1", i))
    writer.close()
    assert writer.dropped == 1
    assert writer.written == 3
    assert store.count_exchanges("r1") == 4


def test_transient_failure_keeps_the_batch(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_run(run_info("r1"))
    writer = BatchWriter(store, "r1")
    real = store.insert_rows
    calls = {"n": 0}

    def flaky(conn: Connection, rows: Sequence[Row]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        real(conn, rows)

    monkeypatch.setattr(store, "insert_rows", flaky)
    first = writer.put(exchange("r1", 1))
    writer.flush()
    assert writer.errors == 1
    assert writer.written == 0
    assert writer.queued == 1
    with pytest.raises(NotStored, match="commit failed"):  # its client is told: no ack
        first.result(timeout=0)
    second = writer.put(exchange("r1", 2))
    writer.close()
    assert writer.written == 2
    assert store.count_exchanges("r1") == 2  # the failed one stored on retry, unacknowledged
    assert second.result(timeout=0) is None


def test_each_put_is_acknowledged_only_after_its_commit(store: Store,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The future of an exchange resolves once its row is in the database, seen from another
    connection; many exchanges queued meanwhile share one commit (group commit)."""
    store.create_run(run_info("r1"))
    writer = BatchWriter(store, "r1", flush_interval_s=1.0)  # the tick is not what commits
    real, seen = store.insert_rows, []

    def slow(conn: Connection, rows: Sequence[Row]) -> None:
        seen.append(len(rows))
        time.sleep(0.05)  # a commit in progress while more are put
        real(conn, rows)

    monkeypatch.setattr(store, "insert_rows", slow)
    writer.start()
    try:
        t = time.monotonic()
        futures = [writer.put(exchange("r1", 0))]
        time.sleep(0.01)
        futures += [writer.put(exchange("r1", i)) for i in range(1, 30)]
        for i, future in enumerate(futures):
            future.result(timeout=5)
            assert store.count_exchanges("r1") >= i + 1  # committed: seen by another connection
        assert time.monotonic() - t < 0.9  # committed at once, not on the 1 s tick
        assert sum(seen) == 30
        assert len(seen) < 30
    finally:
        writer.close()


def test_refused_and_dropped_exchanges_are_never_acknowledged(store: Store) -> None:
    store.create_run(run_info("r1"))
    store.write_exchanges([exchange("r1", 2)])
    writer = BatchWriter(store, "r1", max_pending=3)  # not started: nothing drains
    futures = [writer.put(exchange("r1", i)) for i in range(4)]
    with pytest.raises(NotStored, match="queue full"):
        futures[3].result(timeout=0)
    writer.close()
    with pytest.raises(NotStored, match="refused"):
        futures[2].result(timeout=0)  # a duplicate request id
    assert [f.result(timeout=0) for f in (futures[0], futures[1])] == [None, None]
