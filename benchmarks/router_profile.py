"""Where the router's CPU goes per request: each stage of the hot path timed on its own.

The overhead benchmark's request (a streamed ~1 MB chat: 4 data-URL images + text) and
the answer a vLLM-shaped arm streams for it (``tests/support/fake_upstream``: 16 tokens with
ids and top-5 logprobs, what the router asks for) are fed to the router's own functions,
each stage again and again, timed with ``time.process_time`` (CPU, so other jobs on the
machine count less than in wall time). Stages:

- before fan-out (on the client's latency path): parse, depth check, schema, content
  parts + media URLs, augment + arm payload;
- per arm, while streaming: SSE parsing and folding chunks into the transcript;
- after the answer (off the latency path, still CPU): identity (image hashes and the
  fingerprint), the arm records, the ``Exchange`` model, metrics, the store row
  (serialisation) and the store insert (SQLite, batches of 64, one transaction each).

What this cannot time on its own (HTTP parsing, reading the body from the socket, sending
1 MB to each arm, the relay to the client, the event loop) is the rest of the router's
CPU per request, measured whole by ``router_overhead.py``.

    .venv/bin/python -m benchmarks.router_profile
    PYTHONPATH=<export of an older revision>/service .venv/bin/python -m benchmarks.router_profile
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from benchmarks.router_overhead import make_body
from tests.support.fake_upstream import Knobs, _Answer
from tests.support.router_server import dev_settings

from abserve.event_stream import SSEParser
from abserve.records import ArmOutcome, Exchange, RunInfo
from abserve.router.app import arm_payload
from abserve.router.augment import augment
from abserve.router.metrics import RouterMetrics
from abserve.router.settings import RouterSettings
from abserve.router.sse import Transcript
from abserve.router.validation import (
    _check_parts,
    check_depth,
    check_request,
    check_schema,
    identify,
    parse_json,
)
from abserve.store import Store
from abserve.store.rows import exchange_row


def cpu_ms(fn: Callable[[], object], n: int = 200) -> float:
    """Median-of-5 CPU milliseconds per call of ``fn``."""
    runs = []
    for _ in range(5):
        t = time.process_time()
        for _ in range(n):
            fn()
        runs.append((time.process_time() - t) * 1000 / n)
    return sorted(runs)[2]


def capture(tmp: Path) -> tuple[RouterSettings, Exchange, list[bytes]]:
    """What one exchange of the benchmark's request leaves: the settings, the record (both
    arms' transcripts of a vLLM-shaped 16-token stream) and the primary's stream bytes."""
    raw = make_body()
    settings = dev_settings({"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}, tmp)
    sent = orjson.loads(raw)
    augment(sent, "chat/completions", settings)
    stream = [*_Answer(sent, True, Knobs(n_tokens=16)).chunks(), b"data: [DONE]\n\n"]
    arms = {"a": read_stream(stream), "b": read_stream(stream)}
    arms["b"].arm = "b"
    exchange = Exchange(run_id=settings.run_id, request_id="r", endpoint="chat/completions",
                        stream=True, fingerprint="0" * 64, image_hashes=["x"] * 4,
                        started_at=time.time(), arms=arms)
    return settings, exchange, stream


def read_stream(stream: list[bytes]) -> ArmOutcome:
    parser, transcript = SSEParser(), Transcript()
    fast = getattr(transcript, "add_event", None)  # the typed fast path (absent before it)
    for data in stream:
        for payload in parser.feed(data):
            if payload != b"[DONE]" and not (fast is not None and fast(payload, 0.001)):
                transcript.add(orjson.loads(payload), 0.001)
    out = ArmOutcome(arm="a")
    transcript.fill(out)
    return out


def main() -> None:
    raw = make_body()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        settings, exchange, stream = capture(tmp)
        body = parse_json(raw)
        checked = asyncio.run(check_request("chat/completions", raw, max_images=64,
                                            allowed_hosts=[]))

        def aug() -> object:
            sent = dict(checked.body)
            augment(sent, "chat/completions", settings)
            return arm_payload(raw, checked.body, sent)

        def parts() -> None:
            asyncio.run(_check_parts(body, 64, []))

        loop_only = cpu_ms(lambda: asyncio.run(asyncio.sleep(0)))
        arms = exchange.arms
        metrics = RouterMetrics()
        store = Store.open(f"sqlite:///{tmp / 'profile.db'}")
        store.create_run(RunInfo(run_id=exchange.run_id, started_at=time.time()))
        counter = iter(range(10**9))

        def insert() -> None:
            batch = [exchange.model_copy(update={"request_id": f"r{next(counter)}"})
                     for _ in range(64)]
            store.write_exchanges(batch)

        stages: list[tuple[str, float]] = [
            ("parse (1 MB, data URLs cut out first)", cpu_ms(lambda: parse_json(raw))),
            ("  of which depth check", cpu_ms(lambda: check_depth(body))),
            ("schema (pydantic model of the body)",
             cpu_ms(lambda: check_schema("chat/completions", body))),
            ("content parts + media URLs", cpu_ms(parts) - loop_only),
            ("augment + arm payload (no re-encode)", cpu_ms(aug)),
            ("per arm: SSE parse + transcript + arm record", cpu_ms(lambda: read_stream(stream))),
            ("identity: image hashes + fingerprint", cpu_ms(lambda: identify(checked, False))),
            ("Exchange model (2 arms)", cpu_ms(lambda: Exchange(
                run_id=exchange.run_id, request_id="x", endpoint="chat/completions",
                stream=True, fingerprint=exchange.fingerprint,
                image_hashes=exchange.image_hashes, tags={}, started_at=1.0, arms=arms))),
            ("metrics.observe", cpu_ms(lambda: metrics.observe(exchange, "a"))),
            ("store row (serialisation)", cpu_ms(lambda: exchange_row(exchange))),
            ("store insert, SQLite (per exchange, batches of 64)", cpu_ms(insert, 4) / 64),
        ]
        store.close()
    print(f"{'stage':55} CPU ms/request")
    for name, ms in stages:
        print(f"{name:55} {ms:.3f}")



if __name__ == "__main__":
    main()
