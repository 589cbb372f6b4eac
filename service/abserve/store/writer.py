"""Group-committed writes of one run's exchanges, each acknowledged once it is stored.

The router calls ``BatchWriter.put`` once per finished exchange: the record is made a row
there, in the caller's thread (``rows.record_row``: the writer thread then holds the GIL
only for the insert, not for serialising a whole batch while the event loop waits), and
appended to a thread-safe queue without blocking, safe from asyncio code. ``put`` returns
a ``concurrent.futures.Future`` that resolves (``None``) once the exchange's transaction has
committed, or fails (``NotStored``) when it could not be: the router sends a client the
final bytes of its answer only after that (acknowledged means stored).

Group commit: the background thread commits as soon as something is queued, in ONE
transaction holding everything queued meanwhile (many exchanges share one commit, and the
next batch gathers while this one commits); with nothing queued it still refreshes the
run's heartbeat every ``flush_interval_s``. A SIGKILL therefore loses only exchanges whose
client has not received its whole answer (their futures had not resolved); committed
batches are whole (one transaction each), and the stale heartbeat/dead owner makes
readers see the run as ``interrupted``. A commit reached the database (SQLite's WAL file,
PostgreSQL's server), which survives a crash of this process; surviving a power cut needs
an ``fsync`` per commit (``Store.open(..., fsync=True)``: SQLite ``synchronous=FULL``).
Several writers (one per router worker process) may write one run at once into
PostgreSQL; each inserts only the exchanges its own process answered, and only the run's
creator claims ownership in the heartbeat (``claim_owner``).

Failures: a transient database error (locked, connection lost) fails the batch's futures
(their clients get an error, not an acknowledgement), keeps the rows and retries them after
``flush_interval_s`` (a retried row may be stored although its client was told otherwise:
stored-but-not-acknowledged is allowed, the reverse never); a batch refused for integrity
(e.g. a duplicate request id) is retried row by row and only the offending rows are dropped,
logged, counted and failed. Nothing blocks ``put``; past ``max_pending`` queued exchanges
new ones are dropped, counted and failed rather than letting memory grow without bound.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future

from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from abserve.model.records import Exchange
from abserve.model.token_lists import RoutedExchange
from abserve.store.rows import Row, record_row
from abserve.store.store import Store

log = logging.getLogger(__name__)

class NotStored(RuntimeError):
    """An exchange that was not committed (queue full, database refused or unreachable)."""


def _settle(futures: list[Future[None]], error: str | None) -> None:
    for future in futures:
        if future.done():
            continue  # a retried row whose first commit failed: its client was told so
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(NotStored(error))


_WAKE = None  # queued by ``close`` to wake the thread at once


class BatchWriter:
    """Writes one run's exchanges from a background thread, group-committed."""

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
        self.flush_interval_s = flush_interval_s  # heartbeat period; retry delay after errors
        self.max_pending = max_pending
        self.claim_owner = claim_owner  # False in a router worker of several: see Store.heartbeat
        self._queue: queue.SimpleQueue[tuple[Row, Future[None]] | None] = queue.SimpleQueue()
        self._pending: list[tuple[Row, Future[None]]] = []  # taken from the queue, not committed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._beat_at = 0.0  # monotonic time of the last heartbeat written
        self.written = 0  # exchanges committed
        self.dropped = 0  # exchanges lost to a full queue or refused by the database
        self.flushes = 0  # successful flush transactions
        self.errors = 0  # failed flush attempts

    def start(self) -> None:
        """Start the writing thread (once)."""
        if self._thread is not None:
            raise RuntimeError("BatchWriter already started")
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        self._thread = threading.Thread(target=self._run, name=f"abserve-writer-{self.run_id}", daemon=True)
        self._thread.start()

    def put(self, exchange: Exchange | RoutedExchange) -> Future[None]:
        """Queue one exchange for the next commit; never blocks. The future resolves once
        it is committed (``NotStored`` if it will not be acknowledged)."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        if exchange.run_id != self.run_id:
            raise ValueError(
                f"exchange of run {exchange.run_id!r} given to the writer of run {self.run_id!r}"
            )
        future: Future[None] = Future()
        if self._queue.qsize() >= self.max_pending:
            with self._lock:
                self.dropped += 1
            log.error("record queue full: exchange dropped (run %s)", self.run_id)
            future.set_exception(NotStored("record queue full"))
            return future
        self._queue.put((record_row(exchange), future))
        return future

    @property
    def queued(self) -> int:
        """Exchanges accepted by ``put`` and not yet committed (approximate)."""
        return self._queue.qsize() + len(self._pending)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the thread after a last commit of everything queued; marks nothing."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._queue.put(_WAKE)
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("record writer did not stop within %.1f s", timeout_s)
                return
        self.flush()

    def flush(self) -> bool:
        """Commit everything queued now, with a heartbeat when one is due (also used by the
        thread); True unless the database failed (the rows are kept for a retry)."""
        with self._lock:
            self._drain()
            batch = list(self._pending)
            rows = [row for row, _ in batch]
            beat = time.monotonic() - self._beat_at >= self.flush_interval_s / 2 or not rows
            try:
                with self.store.engine.begin() as conn:
                    self.store.insert_rows(conn, rows)
                    if beat:
                        self.store.heartbeat(self.run_id, conn, claim=self.claim_owner)
            except IntegrityError:
                self._pending = []
                self._write_one_by_one(batch)
                return True
            except SQLAlchemyError as exc:
                self.errors += 1
                log.warning(
                    "record commit failed (%s); %d exchanges not acknowledged, kept for retry",
                    type(exc).__name__,
                    len(batch),
                )
                _settle([f for _, f in batch], f"store commit failed ({type(exc).__name__})")
                return False
            if beat:
                self._beat_at = time.monotonic()
            self._pending = []
            self.written += len(batch)
            self.flushes += 1
        _settle([f for _, f in batch], None)
        return True

    def _drain(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _WAKE:
                self._pending.append(item)

    def _write_one_by_one(self, batch: list[tuple[Row, Future[None]]]) -> None:
        for row, future in batch:
            try:
                with self.store.engine.begin() as conn:
                    self.store.insert_rows(conn, [row])
            except IntegrityError as exc:
                self.dropped += 1
                why = type(exc.orig).__name__ if exc.orig is not None else "IntegrityError"
                log.error("exchange %s refused by the store: %s", row["request_id"], why)
                _settle([future], f"refused by the store ({why})")
            except SQLAlchemyError as exc:  # lost on the way: not stored, not retried
                self.errors += 1
                _settle([future], f"store commit failed ({type(exc).__name__})")
            else:
                self.written += 1
                _settle([future], None)
        try:
            self.store.heartbeat(self.run_id, claim=self.claim_owner)
            self._beat_at = time.monotonic()
        except SQLAlchemyError as exc:
            self.errors += 1
            log.warning("heartbeat failed (%s)", type(exc).__name__)

    def _run(self) -> None:
        """Commit as soon as anything is queued (with whatever else came meanwhile);
        a heartbeat alone every ``flush_interval_s`` when nothing is."""
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=self.flush_interval_s)
            except queue.Empty:
                item = _WAKE
            if item is not _WAKE:
                self._pending.append(item)
            try:
                ok = self.flush()
            except Exception:  # keep writing whatever happens; never kill the thread
                self.errors += 1
                log.exception("record commit crashed")
                _settle([f for _, f in self._pending], "store commit crashed")
                ok = False
            if not ok:  # the database is failing: do not spin on it
                self._stop.wait(self.flush_interval_s)
