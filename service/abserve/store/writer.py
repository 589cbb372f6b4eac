"""Batched, off-the-request-path writes of one run's exchanges.

The router calls ``BatchWriter.put`` once per finished exchange: the record is made a row
there, in the caller's thread (``rows.record_row``: the writer thread then holds the GIL
only for the insert, not for serialising a whole batch while the event loop waits), and
appended to a thread-safe queue without blocking, safe from asyncio code. A background thread wakes every
``flush_interval_s`` and, in ONE transaction, inserts everything queued and refreshes the
run's heartbeat. A SIGKILL therefore loses at most what was queued since the last commit
(≤ one flush interval) plus the exchanges still in flight in the router; committed
batches are whole (one transaction each), and the stale heartbeat/dead owner makes
readers see the run as ``interrupted``. Several writers (one per router worker process)
may write one run at once into PostgreSQL; each inserts only the exchanges its own process
answered, and only the run's creator claims ownership in the heartbeat (``claim_owner``).

Failures: a transient database error (locked, connection lost) keeps the batch and retries
it next tick; a batch refused for integrity (e.g. a duplicate request id) is retried row by
row and only the offending rows are dropped, logged and counted. Nothing blocks ``put``;
past ``max_pending`` queued exchanges new ones are dropped and counted rather than letting
memory grow without bound.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from abserve.records import Exchange
from abserve.store.rows import Row, record_row
from abserve.store.store import Store
from abserve.token_lists import RoutedExchange

log = logging.getLogger(__name__)


class BatchWriter:
    """Writes one run's exchanges from a background thread, in batches."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        flush_interval_s: float = 0.5,
        *,
        max_pending: int = 100_000,
        claim_owner: bool = True,
    ) -> None:
        if not 0 < flush_interval_s <= 1.0:
            raise ValueError("flush_interval_s must be in (0, 1] seconds")
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.store = store
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self.claim_owner = claim_owner  # False in a router worker of several: see Store.heartbeat
        self._queue: queue.Queue[Row] = queue.Queue(maxsize=max_pending)
        self._pending: list[Row] = []  # taken from the queue, not yet committed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()
        self.written = 0  # exchanges committed
        self.dropped = 0  # exchanges lost to a full queue or refused by the database
        self.flushes = 0  # successful flush transactions
        self.errors = 0  # failed flush attempts

    def start(self) -> None:
        """Start the flushing thread (once)."""
        if self._thread is not None:
            raise RuntimeError("BatchWriter already started")
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        self._thread = threading.Thread(target=self._run, name=f"abserve-writer-{self.run_id}", daemon=True)
        self._thread.start()

    def put(self, exchange: Exchange | RoutedExchange) -> None:
        """Queue one exchange for the next flush; never blocks."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        if exchange.run_id != self.run_id:
            raise ValueError(
                f"exchange of run {exchange.run_id!r} given to the writer of run {self.run_id!r}"
            )
        try:
            self._queue.put_nowait(record_row(exchange))
        except queue.Full:
            with self._lock:
                self.dropped += 1
            log.error("record queue full: exchange dropped (run %s)", self.run_id)

    @property
    def queued(self) -> int:
        """Exchanges accepted by ``put`` and not yet committed (approximate)."""
        return self._queue.qsize() + len(self._pending)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the thread after a last flush of everything queued; marks nothing."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("record writer did not stop within %.1f s", timeout_s)
                return
        self.flush()

    def flush(self) -> None:
        """Commit everything queued now, with a heartbeat (also used by the thread)."""
        with self._lock:
            self._drain()
            batch = list(self._pending)
            try:
                with self.store.engine.begin() as conn:
                    self.store.insert_rows(conn, batch)
                    self.store.heartbeat(self.run_id, conn, claim=self.claim_owner)
            except IntegrityError:
                self._pending = []
                self._write_one_by_one(batch)
                return
            except SQLAlchemyError as exc:
                self.errors += 1
                log.warning(
                    "record flush failed (%s); %d exchanges kept for retry",
                    type(exc).__name__,
                    len(batch),
                )
                return
            self._pending = []
            self.written += len(batch)
            self.flushes += 1

    def _drain(self) -> None:
        while True:
            try:
                self._pending.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def _write_one_by_one(self, batch: list[Row]) -> None:
        for row in batch:
            try:
                with self.store.engine.begin() as conn:
                    self.store.insert_rows(conn, [row])
            except IntegrityError as exc:
                self.dropped += 1
                log.error(
                    "exchange %s refused by the store: %s",
                    row["request_id"],
                    type(exc.orig).__name__ if exc.orig is not None else "IntegrityError",
                )
            else:
                self.written += 1
        try:
            self.store.heartbeat(self.run_id, claim=self.claim_owner)
        except SQLAlchemyError as exc:
            self.errors += 1
            log.warning("heartbeat failed (%s)", type(exc).__name__)

    def _run(self) -> None:
        next_at = time.monotonic() + self.flush_interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.flush_interval_s
            try:
                self.flush()
            except Exception:  # keep flushing whatever happens; never kill the thread
                self.errors += 1
                log.exception("record flush crashed")
            if time.monotonic() > next_at:  # fell behind: do not burst to catch up
                next_at = time.monotonic() + self.flush_interval_s
