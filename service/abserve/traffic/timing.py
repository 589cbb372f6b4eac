"""Exact client-side timings of one streamed request, read from the SSE stream itself.

``StreamTimer`` is fed the response bytes as they arrive, each with the ``perf_counter`` time
of its arrival; it splits Server-Sent Events (``abserve.base.event_stream``, the splitter the
router uses on each arm's answer), notes when each event carrying output text arrived (the
read that completed the event, its blank line included), and keeps the usage the server
reported. From that it gives time to first token (TTFT), every inter-token latency (ITL) and
end-to-end time, in seconds, unrounded — Locust's own statistics round response times and
are not the source of these numbers.

``TimingRecord`` is one JSONL line per request; ``router_request_id`` (the router's
``x-abserve-request-id`` response header) joins it to the router's exchange records.
"""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import BaseModel, Field

from abserve.base.event_stream import SSEParser


class TimingRecord(BaseModel):
    """What the client saw for one request."""

    run_id: str
    corpus_index: int
    profile: str
    router_request_id: str | None = None
    worker: str = "local"
    status: int | None = None
    error: str | None = None  # short class of failure, never body text
    sent_at: float  # Unix seconds when the request was sent
    scheduled_offset_s: float | None = None  # open-loop plan offset
    lateness_s: float | None = None  # how late against the plan (generator saturation)
    target_rate: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)
    e2e_s: float | None = None
    n_token_events: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    request_bytes: int = 0
    n_images: int = 0
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class StreamTimer:
    """Parses an OpenAI SSE stream chunk by chunk and timestamps its token events."""

    def __init__(self, t_send: float) -> None:
        self.t_send = t_send
        self._events = SSEParser()
        self.token_times: list[float] = []
        self.done = False
        self.error: str | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: bytes, t: float) -> None:
        """Account for bytes that arrived at ``t``: each event they complete arrived then."""
        for payload in self._events.feed(chunk):
            self._event(payload.strip(), t)

    def _event(self, data: bytes, t: float) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.error = self.error or "bad_event"
            return
        if not isinstance(event, dict):
            self.error = self.error or "bad_event"
            return
        if "error" in event:
            self.error = self.error or "stream_error"
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content") or choice.get("text"):
                self.token_times.append(t)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def record(self, t_end: float, **fields: Any) -> TimingRecord:
        """The finished request's record; ``fields`` fill the identity fields."""
        times = self.token_times
        error = fields.pop("error", None) or self.error
        if error is None and not self.done:
            error = "truncated"
        usage = self.usage or {}
        return TimingRecord(
            ttft_s=times[0] - self.t_send if times else None,
            itl_s=[b - a for a, b in pairwise(times)],
            e2e_s=t_end - self.t_send,
            n_token_events=len(times),
            completion_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
            finish_reason=self.finish_reason,
            error=error,
            **fields,
        )


class TimingWriter:
    """Appends records to a JSONL file, one line per request, flushed as it goes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh: IO[bytes] = path.open("ab")
        self._lock = threading.Lock()

    def write(self, record: TimingRecord) -> None:
        line = orjson.dumps(record.model_dump()) + b"\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def read_timings(paths: list[Path]) -> list[TimingRecord]:
    """All records in the given JSONL files."""
    out: list[TimingRecord] = []
    for path in paths:
        with path.open("rb") as fh:
            out += [TimingRecord.model_validate(orjson.loads(line)) for line in fh if line.strip()]
    return out
