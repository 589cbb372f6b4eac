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
  (serialisation) and the store insert (SQLite, batches of 64, one transaction each, each
  row made as the router makes it).

The arm record and the row are made the way the revision under test makes them: its
logprobs as lists and the row packed from them where the ``Transcript`` has ``record``
(``RoutedExchange``, ``rows.routed_row``), else the per-position models (``fill``) and
``rows.exchange_row``. The last line sums what recording a two-arm exchange costs (both
arms' reads, the ``Exchange``, metrics, the row and its insert; the identity apart).

What this cannot time on its own (HTTP parsing, reading the body from the socket, sending
1 MB to each arm, the relay to the client, the event loop) is the rest of the router's
CPU per request, measured whole by ``router_overhead.py``.

    .venv/bin/python -m benchmarks.router_profile
    PYTHONPATH=<export of an older revision>/service .venv/bin/python -m benchmarks.router_profile
    .venv/bin/python -m benchmarks.router_profile --rounds 6 --against <export>/service ...
        (this tree and each export in turn, each run its own process, a table of all)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from benchmarks.router_overhead import make_body
from tests.support.fake_upstream import Knobs, _Answer
from tests.support.router_server import dev_settings

from abserve.model.records import ArmOutcome, Exchange, RunInfo
from abserve.openai_request.validation import (
    _check_parts,
    check_depth,
    check_request,
    check_schema,
    identify,
    parse_json,
)
from abserve.router.app import arm_payload
from abserve.router.augment import augment
from abserve.router.metrics import RouterMetrics
from abserve.router.settings import RouterSettings
from abserve.router.sse import Transcript
from abserve.store import Store
from abserve.store.rows import exchange_row

try:
    from abserve.base.event_stream import SSEParser
except ImportError:  # a revision from before the shared SSE splitter
    from abserve.router.sse import SSEParser  # type: ignore[attr-defined,no-redef]

PER_ARM = "per arm: SSE parse + transcript + arm record"
EXCHANGE = "Exchange model (2 arms)"
METRICS = "metrics.observe"
INSERT = "store row + insert, SQLite (batches of 64)"
RECORDING = "recording a two-arm exchange (2 arms, Exchange, metrics, row + insert)"
ROOT = Path(__file__).resolve().parents[1]


def cpu_ms(fn: Callable[[], object], n: int = 200) -> float:
    """Median-of-5 CPU milliseconds per call of ``fn``."""
    runs = []
    for _ in range(5):
        t = time.process_time()
        for _ in range(n):
            fn()
        runs.append((time.process_time() - t) * 1000 / n)
    return sorted(runs)[2]


Recorded = Callable[[str], Any]  # request id -> the store row of the captured exchange


def capture(tmp: Path) -> tuple[RouterSettings, Exchange, list[bytes], Recorded]:
    """What one exchange of the benchmark's request leaves: the settings, the record (both
    arms' transcripts of a vLLM-shaped 16-token stream), the primary's stream bytes and how
    the router makes the record's store row (under any request id)."""
    raw = make_body()
    settings = dev_settings({"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}, tmp)
    sent = orjson.loads(raw)
    augment(sent, "chat/completions", settings)
    stream = [*_Answer(sent, True, Knobs(n_tokens=16)).chunks(), b"data: [DONE]\n\n"]
    (a, lists_a), (b, lists_b) = read_stream(stream), read_stream(stream)
    b.arm = "b"
    exchange = Exchange(run_id=settings.run_id, request_id="r", endpoint="chat/completions",
                        stream=True, fingerprint="0" * 64, image_hashes=["x"] * 4,
                        started_at=time.time(), arms={"a": a, "b": b})
    if lists_a is None:  # a revision that builds the models
        return settings, exchange, stream, lambda rid: exchange_row(
            exchange.model_copy(update={"request_id": rid}))
    from abserve.model.token_lists import RoutedExchange
    from abserve.store.rows import routed_row
    lists = {"a": lists_a, "b": lists_b}
    return settings, exchange, stream, lambda rid: routed_row(
        RoutedExchange(exchange.model_copy(update={"request_id": rid}), lists))


def read_stream(stream: list[bytes]) -> tuple[ArmOutcome, Any]:
    """One arm's record as the router makes it: the outcome, and its logprobs as lists
    (None where the revision builds them into the outcome as models)."""
    parser, transcript = SSEParser(), Transcript()
    fast = getattr(transcript, "add_event", None)  # the typed fast path (absent before it)
    for data in stream:
        for payload in parser.feed(data):
            if payload != b"[DONE]" and not (fast is not None and fast(payload, 0.001)):
                transcript.add(orjson.loads(payload), 0.001)
    out = ArmOutcome(arm="a")
    record = getattr(transcript, "record", None)  # the lists (absent before them)
    if record is None:
        transcript.fill(out)
        return out, None
    return out, record(out)


def measure() -> list[tuple[str, float]]:
    """Every stage's CPU ms per request, in this process (the revision it imports)."""
    raw = make_body()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        settings, exchange, stream, row_of = capture(tmp)
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
            rows = [row_of(f"r{next(counter)}") for _ in range(64)]
            with store.engine.begin() as conn:
                store.insert_rows(conn, rows)

        stages: list[tuple[str, float]] = [
            ("parse (1 MB, data URLs cut out first)", cpu_ms(lambda: parse_json(raw))),
            ("  of which depth check", cpu_ms(lambda: check_depth(body))),
            ("schema (pydantic model of the body)",
             cpu_ms(lambda: check_schema("chat/completions", body))),
            ("content parts + media URLs", cpu_ms(parts) - loop_only),
            ("augment + arm payload (no re-encode)", cpu_ms(aug)),
            (PER_ARM, cpu_ms(lambda: read_stream(stream))),
            ("identity: image hashes + fingerprint", cpu_ms(lambda: identify(checked, False))),
            (EXCHANGE, cpu_ms(lambda: Exchange(
                run_id=exchange.run_id, request_id="x", endpoint="chat/completions",
                stream=True, fingerprint=exchange.fingerprint,
                image_hashes=exchange.image_hashes, tags={}, started_at=1.0, arms=arms))),
            (METRICS, cpu_ms(lambda: metrics.observe(exchange, "a"))),
            ("store row (serialisation)", cpu_ms(lambda: row_of("x"))),
            (INSERT, cpu_ms(insert, 4) / 64),
        ]
        store.close()
    by_name = dict(stages)
    record = (2 * by_name[PER_ARM] + sum(by_name[n] for n in (EXCHANGE, METRICS, INSERT)))
    stages.append((RECORDING, record))
    return stages


def alternate(against: list[Path], rounds: int) -> None:
    """This tree and each of ``against`` (revisions' ``service`` folders) measured in turn,
    each round in fresh processes: the median and range of each stage, side by side."""
    trees = {"this tree": ROOT / "service", **{f"{p.parent.name}": p for p in against}}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, service in trees.items():
            out = subprocess.run([sys.executable, "-m", "benchmarks.router_profile", "--json"],
                                 cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{service}:{ROOT}"},
                                 check=True, capture_output=True, text=True).stdout
            runs[name].append(dict(json.loads(out)))
    print(f"{rounds} rounds, the trees in turn, CPU ms/request, median [min-max]")
    print(f"{'stage':72}" + "".join(f" {name:>22}" for name in trees))
    for stage in runs["this tree"][0]:
        cells = []
        for name in trees:
            values = sorted(run[stage] for run in runs[name])
            cells.append(f"{statistics.median(values):.3f} [{values[0]:.3f}-{values[-1]:.3f}]")
        print(f"{stage:72}" + "".join(f" {cell:>22}" for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the stages as JSON")
    parser.add_argument("--against", type=Path, nargs="*", default=[],
                        help="service folders of exports of other revisions (named by their folder)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    if args.against:
        alternate([p.resolve() for p in args.against], args.rounds)
        return
    stages = measure()
    if args.json:
        print(json.dumps(stages))
        return
    print(f"{'stage':55} CPU ms/request")
    for name, ms in stages:
        print(f"{name:55} {ms:.3f}")


if __name__ == "__main__":
    main()
