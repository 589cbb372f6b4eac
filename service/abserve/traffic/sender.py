"""Send one corpus entry and time its stream, with urllib3 (gevent-friendly under Locust).

Chunked responses are read chunk by chunk as they arrive (``read_chunked``), other responses
with ``read1`` (whatever bytes are there), so each token event is timestamped when its bytes
arrive, not when a buffer fills. Errors become a short class in the record, never body text.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import orjson
import urllib3

from abserve.records import REQUEST_ID_HEADER
from abserve.traffic.corpus import API_KEY_ENV, CHAT_PATH, CorpusEntry
from abserve.traffic.shapes import Arrival
from abserve.traffic.timing import StreamTimer, TimingRecord

__all__ = ["API_KEY_ENV", "auth_headers", "make_pool", "send_entry"]


def auth_headers() -> dict[str, str]:
    """The Authorization header when ``ABSERVE_API_KEY`` is set, else nothing."""
    key = os.environ.get(API_KEY_ENV, "")
    return {"authorization": f"Bearer {key}"} if key else {}


def make_pool(users: int) -> urllib3.PoolManager:
    """A connection pool sized for ``users`` concurrent requests."""
    return urllib3.PoolManager(num_pools=4, maxsize=max(users, 1), block=False, retries=False)


def send_entry(pool: urllib3.PoolManager, host: str, entry: CorpusEntry, *, run_id: str,
               profile: str, worker: str, timeout_s: float, arrival: Arrival | None = None,
               scheduled_at: float | None = None,
               tags: dict[str, str] | None = None) -> TimingRecord:
    """POST one entry to ``host``'s chat endpoint and return what the client measured."""
    url = host.rstrip("/") + CHAT_PATH
    sent_at = time.time()
    t0 = time.perf_counter()
    timer = StreamTimer(t0)
    status = None
    request_id = None
    error = None
    try:
        headers = entry.headers(run_id, tags) | auth_headers()
        resp = pool.urlopen("POST", url, body=entry.body, headers=headers,
                            preload_content=False, redirect=False,
                            timeout=urllib3.Timeout(connect=10.0, read=timeout_s))
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
    except urllib3.exceptions.TimeoutError:
        error = "timeout"
    except (urllib3.exceptions.NewConnectionError, ConnectionRefusedError):
        error = "connect"
    except (urllib3.exceptions.HTTPError, OSError):
        error = "protocol"
    t_end = time.perf_counter()
    lateness = t0 - scheduled_at if scheduled_at is not None else None
    return timer.record(
        t_end, run_id=run_id, corpus_index=entry.index, profile=profile,
        router_request_id=request_id, worker=worker, status=status, error=error,
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
