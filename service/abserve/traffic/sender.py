"""Send one corpus entry and time its stream, with urllib3 (gevent-friendly under Locust).

Chunked responses are read chunk by chunk as they arrive (``read_chunked``), other responses
with ``read1`` (whatever bytes are there), so each token event is timestamped when its bytes
arrive, not when a buffer fills. Errors become a short class in the record, never body text.

A request that never reached the router (connection refused, its name not resolving: the
router restarting, its container recreated) is not an exchange: nothing was sent to any arm.
It is sent again, with a growing pause, for up to ``CONNECT_RETRY_S``; its record then times
the attempt that got through (its lateness shows the wait), or says ``connect`` if none did.

With several hosts (router replicas of one run: docs/scale-out.md) request ``k`` goes to host
``k mod n`` (the same spread whatever the number of load workers), and a request that reached
nobody there is sent at once to the next host (a replica lost: the others take its share).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import orjson
import urllib3

from abserve.model.records import REQUEST_ID_HEADER
from abserve.traffic.corpus import API_KEY_ENV, CorpusEntry
from abserve.traffic.shapes import Arrival
from abserve.traffic.timing import StreamTimer, TimingRecord

__all__ = ["API_KEY_ENV", "CONNECT_RETRY_S", "SendOptions", "auth_headers", "make_pool", "send_entry"]

log = logging.getLogger("abserve.traffic")
CONNECT_RETRY_S = 30.0  # how long a request that reached nobody is tried again (a restart: ~10 s)
_PAUSES = (0.25, 0.5, 1.0, 2.0)  # between connection attempts; the last one repeats


@dataclass(frozen=True)
class SendOptions:
    """What every request of one load process is sent with (``RunOptions.sending``)."""

    run_id: str
    profile: str  # the profile's name, recorded with each request
    worker: str  # this load process (``local``, or a distributed worker's name)
    timeout_s: float  # the read timeout of one request
    tags: dict[str, str] = field(default_factory=dict)  # extra x-abserve-* tags of every request
    connect_retry_s: float = CONNECT_RETRY_S  # a request that reached nobody is tried again so long


def auth_headers() -> dict[str, str]:
    """The Authorization header when ``ABSERVE_API_KEY`` is set, else nothing."""
    key = os.environ.get(API_KEY_ENV, "")
    return {"authorization": f"Bearer {key}"} if key else {}


def make_pool(users: int) -> urllib3.PoolManager:
    """A connection pool sized for ``users`` concurrent requests."""
    return urllib3.PoolManager(num_pools=4, maxsize=max(users, 1), block=False, retries=False)


def send_entry(pool: urllib3.PoolManager, host: str | Sequence[str], entry: CorpusEntry,
               opts: SendOptions, *, arrival: Arrival | None = None,
               scheduled_at: float | None = None) -> TimingRecord:
    """POST one entry to ``host``'s endpoint (``entry.path``: chat/completions unless an
    imported completions request) and return what the client measured; with several hosts,
    to host ``entry.index mod n``, the next one when it cannot be reached."""
    hosts = [host] if isinstance(host, str) else list(host)
    first = time.monotonic()
    attempt = 0
    while True:
        for k in range(len(hosts)):
            host = hosts[(entry.index + k) % len(hosts)]
            record = _attempt(pool, host, entry, opts, arrival, scheduled_at)
            if record.error != "connect":
                return record
        pause = _PAUSES[min(attempt, len(_PAUSES) - 1)]
        if record.error != "connect" or time.monotonic() - first + pause > opts.connect_retry_s:
            return record
        if attempt == 0:
            log.warning("abserve: %s unreachable; request %d tried again for up to %.0f s",
                        host, entry.index, opts.connect_retry_s)
        attempt += 1
        time.sleep(pause)  # gevent-patched under Locust: other users go on


def _attempt(pool: urllib3.PoolManager, host: str, entry: CorpusEntry, opts: SendOptions,
             arrival: Arrival | None, scheduled_at: float | None) -> TimingRecord:
    """One try: the request, its stream timed, errors as a short class."""
    url = host.rstrip("/") + entry.path
    sent_at = time.time()
    t0 = time.perf_counter()
    timer = StreamTimer(t0)
    status = None
    request_id = None
    error = None
    try:
        headers = entry.headers(opts.run_id, opts.tags) | auth_headers()
        resp = pool.urlopen("POST", url, body=entry.body, headers=headers,
                            preload_content=False, redirect=False,
                            timeout=urllib3.Timeout(connect=10.0, read=opts.timeout_s))
        status = resp.status
        request_id = resp.headers.get(REQUEST_ID_HEADER)
        try:
            if status != 200:
                resp.read()
                error = "http_status"
            elif "text/event-stream" in resp.headers.get("content-type", ""):
                for chunk in _arrivals(resp):
                    timer.feed(chunk, time.perf_counter())
            else:
                _whole(timer, resp.read())
        finally:
            resp.release_conn()
    except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError,
            ConnectionRefusedError):
        error = "connect"  # first: urllib3's NewConnectionError is a ConnectTimeoutError
    except urllib3.exceptions.TimeoutError:
        error = "timeout"
    except (urllib3.exceptions.HTTPError, OSError):
        error = "protocol"
    t_end = time.perf_counter()
    lateness = t0 - scheduled_at if scheduled_at is not None else None
    return timer.record(
        t_end, run_id=opts.run_id, corpus_index=entry.index, profile=opts.profile,
        router_request_id=request_id, worker=opts.worker, status=status, error=error,
        sent_at=sent_at, scheduled_offset_s=arrival.offset if arrival else None,
        lateness_s=lateness, target_rate=arrival.rate if arrival else None,
        request_bytes=len(entry.body), n_images=entry.n_images)


def _arrivals(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    if resp.chunked and isinstance(resp, urllib3.HTTPResponse):
        yield from resp.read_chunked(decode_content=True)
        return
    while chunk := resp.read1(65536):
        yield chunk


def _whole(timer: StreamTimer, body: bytes) -> None:
    """A non-streamed answer: one JSON body; no token times, only usage and the end."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        timer.error = "bad_response"
        return
    timer.done = True
    if isinstance(data, dict):
        timer.usage = data.get("usage")
        choices = data.get("choices") or [{}]
        timer.finish_reason = choices[0].get("finish_reason")
