"""TEST-ONLY faults that abserve must catch: never enable them on a server you judge.

A comparison service earns trust by failing builds that are wrong. These mutants are the
wrong builds, selected per server by ``ABSERVE_MUTANT`` next to ``ABSERVE_MM_LOOKUP`` and
recorded (and proven) in the server's telemetry as ``<lookup>+<mutant>``, so a report can
never mistake a mutant arm for a real one:

- ``drop-straddle`` (correctness): an off-by-one at the window's end, the kind of bug a
  "clean-up" of the window test makes: an item that straddles the end of a prefill chunk
  is dropped from that step, so the part of the image inside the chunk is never embedded.
- ``slow`` (latency): a known cost per lookup call, ``ABSERVE_MUTANT_DELAY_US``
  microseconds (default 2000) of busy work, the shape of a lookup that got slower; with
  ``ABSERVE_MUTANT_DELAY_KIND=sleep`` the call sleeps instead, leaving the core to the
  server's other processes (measured on 2 cores: 5 ms per engine step, busy or sleeping, cost
  6.3-6.5 ms per output token; the rest of the step ran about 1.2 ms slower after the pause).
- ``embed-fault`` (silent correctness): on requests with more than
  ``ABSERVE_MUTANT_MIN_ITEMS`` items (default 64) the embedding of the middle item is
  zeroed, an image-handling bug that flips few or no output tokens (issue 9).
- ``dense-slow`` (latency in one stratum): the ``slow`` delay only on lookup calls of requests
  with at least ``ABSERVE_MUTANT_MIN_ITEMS`` items (default 64): image-dense steps pay, every
  other step runs at full speed, so the overall shift moves by the stratum's share (issue 32).
- ``stall`` (latency in the tail): on a share ``ABSERVE_MUTANT_STALL_SHARE`` (default 0.25) of
  requests, chosen by a hash of the request's first item, the request's first lookup call
  takes ``ABSERVE_MUTANT_DELAY_US`` more (an occasional stall of the prefill): the median
  request is untouched, the winsorized mean barely moves, the p95 jumps (issue 32).
- ``decode-stall`` (latency in the tail, after the first token): on a share
  ``ABSERVE_MUTANT_STALL_SHARE`` (default 0.125: one request in eight) of requests, chosen by
  the same hash, the request's ``ABSERVE_MUTANT_STALL_STEP``-th (default 4) single-token window,
  a decode step (at most one prefill chunk is a single token), takes ``ABSERVE_MUTANT_DELAY_US``
  more: the first token is on time, the stream stalls in its middle, so TTFT is untouched and
  the time per output token and end-to-end latency of those requests jump (issue 47).
- ``salt-prefix`` (latency of conversations, issue 51): every request gets its own cache salt
  (vLLM's ``cache_salt``, part of the first block's hash, so of every block hash after it), a
  cache key salted per request: no request ever reuses a block another request left in the
  prefix cache. Turns that resend a conversation's history prefill all of it again, so TTFT
  of later turns jumps while first turns (nothing to reuse) stay as they were; outputs are
  unchanged. Installed in the engine core's ``vllm.v1.request.Request``.
- ``batch-tax`` (capacity, issue 59): every gather step costs ``ABSERVE_MUTANT_DELAY_US``
  (default 2000) of busy work for each request running beside the first (``n - 1`` for ``n``
  in the batch): free at one request in flight, so one-user latency gates see nothing, and
  dearer the fuller the batch, as a cost that walks the running batch. V1 runner only.

Stdlib only (runs inside vLLM processes, imported by ``abserve.vllm_plugin``).
"""

from __future__ import annotations

import inspect
import os
import time
import zlib
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

from abserve.vllm_plugin.lookup import Feature, linear_window

MUTANT_ENV = "ABSERVE_MUTANT"
DELAY_ENV = "ABSERVE_MUTANT_DELAY_US"
MIN_ITEMS_ENV = "ABSERVE_MUTANT_MIN_ITEMS"
DELAY_KIND_ENV = "ABSERVE_MUTANT_DELAY_KIND"
STALL_SHARE_ENV = "ABSERVE_MUTANT_STALL_SHARE"
STALL_STEP_ENV = "ABSERVE_MUTANT_STALL_STEP"
DELAY_KINDS = ("busy", "sleep")
DEFAULT_DELAY_US = 2000
MUTANTS = ("drop-straddle", "slow", "embed-fault", "dense-slow", "stall", "decode-stall", "salt-prefix",
           "batch-tax")
LATENCY_MUTANTS = ("slow", "dense-slow", "stall", "decode-stall", "salt-prefix")
# Mutants whose fault needs vLLM's V1 model runner, and why. Model Runner V2 (the GPU default,
# VLLM_USE_V2_MODEL_RUNNER=1) looks the window up only for requests that are prefilling, never on
# a decode step, and has no ``GPUModelRunner``; under it these would inject nothing (or not the
# effect their checks expect), so a config that runs one there is refused (``abserve.config``).
# ``drop-straddle`` and ``stall`` act on prefill lookups, ``salt-prefix`` on the engine core's
# requests: they work under both runners.
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V1_RUNNER_ONLY = {
    "decode-stall": "stalls a decode step's window lookup, which Model Runner V2 never makes",
    "slow": "its delay per output token comes from the window lookup the V1 runner makes on every "
            "decode step; Model Runner V2 looks up only while prefilling",
    "dense-slow": "its delay per output token comes from the window lookup the V1 runner makes on "
                  "every decode step; Model Runner V2 looks up only while prefilling",
    "embed-fault": "patches the V1 runner's GPUModelRunner, which Model Runner V2 does not run",
    "batch-tax": "patches the V1 runner's GPUModelRunner, which Model Runner V2 does not run",
}
# The module whose ``Request`` the ``salt-prefix`` mutant patches (the engine core's requests).
SALT_MODULE = "vllm.v1.request"
SALT_PREFIX = "abserve-salt-prefix:"

Lookup = Callable[[Sequence[Feature], int, int], tuple[int, int]]


def selected_mutant() -> str | None:
    """The mutant this process runs, validated; None when unset."""
    mutant = os.environ.get(MUTANT_ENV, "").strip()
    if not mutant:
        return None
    if mutant not in MUTANTS:
        raise ValueError(f"{MUTANT_ENV}={mutant!r}: expected one of {', '.join(MUTANTS)}")
    return mutant


def delay_us() -> int:
    return int(os.environ.get(DELAY_ENV, str(DEFAULT_DELAY_US)))


def delay_kind() -> str:
    kind = os.environ.get(DELAY_KIND_ENV, "busy").strip() or "busy"
    if kind not in DELAY_KINDS:
        raise ValueError(f"{DELAY_KIND_ENV}={kind!r}: expected one of {', '.join(DELAY_KINDS)}")
    return kind


def min_items() -> int:
    return int(os.environ.get(MIN_ITEMS_ENV, "64"))


def stall_share(default: str = "0.25") -> float:
    return float(os.environ.get(STALL_SHARE_ENV, default))


def stall_step() -> int:
    return int(os.environ.get(STALL_STEP_ENV, "4"))


def drop_straddle_window(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
    """The linear scan with an off-by-one: items ending past ``end`` are left out."""
    lo, hi = linear_window(features, start, end)
    while hi > lo and features[hi - 1].mm_position.offset + features[hi - 1].mm_position.length > end:
        hi -= 1
    return lo, hi


def with_delay(lookup: Lookup, micros: int, kind: str = "busy") -> Lookup:
    """``lookup`` taking at least ``micros`` microseconds per call: busy work (CPU time) or,
    with ``kind="sleep"``, a sleep for what is left after the lookup."""

    @wraps(lookup)
    def slow_lookup(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
        deadline = time.perf_counter_ns() + micros * 1000
        result = lookup(features, start, end)
        if kind == "sleep":
            time.sleep(max(deadline - time.perf_counter_ns(), 0) / 1e9)
        while time.perf_counter_ns() < deadline:
            pass
        return result

    return slow_lookup


def only_dense(lookup: Lookup, slow: Lookup, threshold: int) -> Lookup:
    """``slow`` on calls for requests with at least ``threshold`` items, ``lookup`` otherwise."""

    @wraps(lookup)
    def dense_lookup(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
        return (slow if len(features) >= threshold else lookup)(features, start, end)

    return dense_lookup


def request_key(features: Sequence[Feature]) -> str:
    """Which request a lookup call serves: its first item's identifier (or position) and count."""
    first = features[0]
    ident = getattr(first, "identifier", None) or f"{first.mm_position.offset}:{first.mm_position.length}"
    return f"{ident}/{len(features)}"


def stalled(key: str, share: float) -> bool:
    """Whether the request ``key`` is one of the stalled share (a stable hash, no randomness)."""
    return zlib.crc32(key.encode()) % 10_000 < share * 10_000


def with_stalls(lookup: Lookup, micros: int, share: float, kind: str = "sleep") -> Lookup:
    """``lookup`` whose first call for a stalled request takes ``micros`` more."""
    slow = with_delay(lookup, micros, kind)
    seen: set[str] = set()

    @wraps(lookup)
    def stalling_lookup(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
        if not features:
            return lookup(features, start, end)
        key = request_key(features)
        if key in seen or not stalled(key, share):
            return lookup(features, start, end)
        if len(seen) > 100_000:
            seen.clear()
        seen.add(key)
        return slow(features, start, end)

    return stalling_lookup


def with_decode_stalls(lookup: Lookup, micros: int, share: float, step: int = 4,
                       kind: str = "sleep") -> Lookup:
    """``lookup`` whose ``step``-th single-token window of a stalled request takes ``micros``
    more: a decode step after the first token (a request's first window starts at 0 and
    restarts its count; only its last prefill chunk can also be a single token)."""
    slow = with_delay(lookup, micros, kind)
    steps: dict[str, int] = {}

    @wraps(lookup)
    def decode_stalling_lookup(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
        if not features:
            return lookup(features, start, end)
        key = request_key(features)
        if start == 0:
            if len(steps) > 100_000:
                steps.clear()
            steps[key] = 0
        if end - start != 1 or key not in steps:
            return lookup(features, start, end)
        steps[key] += 1
        if steps[key] == step and stalled(key, share):
            return slow(features, start, end)
        return lookup(features, start, end)

    return decode_stalling_lookup


def mutate_lookup(mutant: str | None, lookup: Lookup) -> Lookup:
    """The lookup a mutant arm runs instead of ``lookup``."""
    if mutant == "drop-straddle":
        return drop_straddle_window
    if mutant == "slow":
        return with_delay(lookup, delay_us(), delay_kind())
    if mutant == "dense-slow":
        return only_dense(lookup, with_delay(lookup, delay_us(), delay_kind()), min_items())
    if mutant == "stall":
        return with_stalls(lookup, delay_us(), stall_share(), delay_kind())
    if mutant == "decode-stall":
        return with_decode_stalls(lookup, delay_us(), stall_share("0.125"), stall_step(), delay_kind())
    return lookup


def install_embed_fault(runner_cls: Any, on_fault: Callable[[], None]) -> None:
    """Zero the middle item's encoder output on requests with many items (V1 runner).

    Wraps ``_gather_mm_embeddings`` to choose, per step, the faulty item of each large
    request, and ``_get_encoder_output_from_cache`` to hand out zeros for those items.
    """
    gather = runner_cls._gather_mm_embeddings
    get_cached = runner_cls._get_encoder_output_from_cache
    threshold = min_items()
    faulty: set[str] = set()

    @wraps(gather)
    def choosing_gather(self: Any, *args: Any, **kwargs: Any) -> Any:
        faulty.clear()
        for req_id in self.input_batch.req_ids:
            features = self.requests[req_id].mm_features
            if len(features) > threshold:
                faulty.add(features[len(features) // 2].identifier)
        return gather(self, *args, **kwargs)

    @wraps(get_cached)
    def zeroing_get(self: Any, mm_hash: str) -> Any:
        output = get_cached(self, mm_hash)
        if output is not None and mm_hash in faulty:
            on_fault()
            return output * 0
        return output

    runner_cls._gather_mm_embeddings = choosing_gather
    runner_cls._get_encoder_output_from_cache = zeroing_get


def batch_tax_us(running: int, micros: int) -> int:
    """The ``batch-tax`` cost of one gather step with ``running`` requests in the batch."""
    return max(running - 1, 0) * micros


def install_batch_tax(runner_cls: Any, on_tax: Callable[[], None]) -> None:
    """Make every gather step busy-wait ``batch_tax_us`` of its batch (``batch-tax``, V1 runner)."""
    gather = runner_cls._gather_mm_embeddings
    micros = delay_us()

    @wraps(gather)
    def taxed_gather(self: Any, *args: Any, **kwargs: Any) -> Any:
        cost = batch_tax_us(len(self.input_batch.req_ids), micros)
        if cost:
            deadline = time.perf_counter_ns() + cost * 1000
            while time.perf_counter_ns() < deadline:
                pass
            on_tax()
        return gather(self, *args, **kwargs)

    runner_cls._gather_mm_embeddings = taxed_gather


def salted(request_id: str, salt: str | None) -> str:
    """The cache salt of a request under ``salt-prefix``: its own id (and any salt it had)."""
    return f"{SALT_PREFIX}{request_id}:{salt or ''}"


def install_cache_salt(request_cls: Any, on_salt: Callable[[], None]) -> None:
    """Salt every new request's prefix-cache key with its own id (``salt-prefix``).

    Wraps ``Request.__init__``: its ``cache_salt`` argument is replaced before the block hashes
    are computed (vLLM hashes the salt into the first block, and each block's hash chains the
    one before), so no two requests share a cached block. ``on_salt`` counts the requests."""
    init = request_cls.__init__
    if getattr(init, "abserve_salted", False):
        return
    signature = inspect.signature(init)

    @wraps(init)
    def salting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["cache_salt"] = salted(str(bound.arguments["request_id"]),
                                               bound.arguments.get("cache_salt"))
        init(*bound.args, **bound.kwargs)
        on_salt()

    salting_init.abserve_salted = True  # type: ignore[attr-defined]
    request_cls.__init__ = salting_init
