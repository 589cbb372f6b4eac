"""Turning a finished fan-out into one ``Exchange`` record, and handing it to the store.

``Recorder._finish`` runs as its own task per exchange, while the client's answer is on
its way: it waits for every arm (the slowest shadow included), on a sample of exchanges
asks every arm for the prompt logprobs (``prompt_sample``), builds the record,
updates the metrics and gives the record to a sink. ``track`` returns the exchange's
``stored`` future: True once the sink says the record is committed (the store's ``put``
returns a future resolved after its group commit; a sink that returns None stores at once),
False when it could not be recorded or stored. With ``acknowledge: stored`` the client's
final bytes wait for it (``relay``). The record is a ``RoutedExchange``:
the ``Exchange`` less the arms' output logprobs, which stay the lists the arms' transcripts
made (``abserve.model.token_lists``), packed as they are into the store's row; their per-position
models are built only by a sink that asks (``RoutedExchange.full``). The sink is the store's
``BatchWriter`` (group commits on its own thread, off the event loop); tests of one
piece may pass any object with ``put(record)``. The request's identity (XXH3-128 of its
images, BLAKE3 of the canonical body) is computed on the loop: handing it to a thread cost
more CPU than hashing did even with BLAKE3 (router CPU per 1 MB two-arm request 4.90 ->
4.50 ms, interleaved A/B: the handoff and the GIL passing between threads). The recorder
also keeps the set of exchanges in flight, which is what the concurrency cap counts and
shutdown drains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from abserve.model.records import Exchange
from abserve.model.token_lists import RoutedExchange
from abserve.openai_request.validation import CheckedRequest, identify
from abserve.router.fanout import FanOut
from abserve.router.metrics import RouterMetrics
from abserve.router.prompt_sample import probe, sampled

log = logging.getLogger("abserve.router")


class ExchangeSink(Protocol):
    """Where finished records go (``abserve.store.BatchWriter`` in production): ``put``
    returns a future resolved once the record is committed, or None when it is at once."""

    def put(self, record: RoutedExchange) -> Future[None] | None: ...


class Recorder:
    """Builds and sinks records; tracks exchanges in flight."""

    def __init__(self, sink: ExchangeSink, metrics: RouterMetrics, run_id: str,
                 primary: str, keep_text: bool = False, prompt_logprobs_fraction: float = 0.0,
                 prompt_logprobs_k: int = 0) -> None:
        self.sink, self.metrics, self.run_id, self.primary = sink, metrics, run_id, primary
        self.keep_text = keep_text
        self.prompt_fraction, self.prompt_k = prompt_logprobs_fraction, prompt_logprobs_k
        self.pending: dict[asyncio.Task[None], FanOut] = {}
        self.admitted = 0  # exchanges admitted and not yet recorded
        self.on_recorded: Callable[[], None] = lambda: None  # after ``admitted`` fell

    def track(self, checked: CheckedRequest, fan: FanOut, request_id: str, started_at: float,
              tags: dict[str, str]) -> asyncio.Future[bool]:
        """Record this fan-out once every arm is done (runs in the background); the future
        returned says whether the record was committed (see the module docstring)."""
        stored: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self._finish(checked, fan, request_id, started_at, tags, stored))
        self.pending[task] = fan
        task.add_done_callback(lambda t: self.pending.pop(t, None))
        return stored

    async def _finish(self, checked: CheckedRequest, fan: FanOut, request_id: str,
                      started_at: float, tags: dict[str, str],
                      stored: asyncio.Future[bool]) -> None:
        ok = False
        try:
            arms = await fan.wait()
            ident = identify(checked, self.keep_text)  # on the loop: see the module docstring
            if sampled(ident.fingerprint, self.prompt_fraction):
                arms = await probe(fan.calls, checked.body, checked.endpoint, self.prompt_k)
            exchange = Exchange(
                run_id=self.run_id, request_id=request_id, endpoint=checked.endpoint,
                stream=checked.stream, fingerprint=ident.fingerprint,
                prompt_text=ident.prompt_text, image_hashes=ident.image_hashes,
                tags=tags, started_at=started_at, arms=arms,
            )
            self.metrics.observe(exchange, self.primary)
            committed = self.sink.put(RoutedExchange(exchange, fan.logprobs()))
            if committed is not None:
                await asyncio.wrap_future(committed)
            ok = True
            log.info("exchange %s recorded: %s", request_id, _summary(exchange))
        except Exception:
            log.exception("exchange %s could not be recorded", request_id)
        finally:
            if not stored.done():
                stored.set_result(ok)
            self.admitted -= 1
            self.on_recorded()
            self.metrics.in_flight.set(self.admitted)

    async def drain(self, timeout_s: float) -> int:
        """Wait for exchanges in flight; after ``timeout_s`` cancel their arms (recorded as
        cancelled). Returns how many had to be cancelled."""
        if not self.pending:
            return 0
        _, left = await asyncio.wait(set(self.pending), timeout=timeout_s)
        for task in left:
            self.pending[task].cancel()
        if left:
            await asyncio.wait(left, timeout=5.0)
        return len(left)


def _summary(exchange: Exchange) -> str:
    parts = []
    for name, arm in exchange.arms.items():
        state = arm.error_class or "ok"
        took = f"{(arm.t_end or 0) - arm.t_send:.3f}s"
        parts.append(f"{name}={arm.status}/{state}/{len(arm.token_ids)}tok/{took}")
    return " ".join(parts)


def wall_clock() -> float:
    return time.time()
