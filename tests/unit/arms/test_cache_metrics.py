"""Each arm's prefix-cache counters are read from its ``/metrics`` page and differenced per block."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from abserve.arms.cache_metrics import BlockCacheReader, block_counts, parse_prefix_cache, read_prefix_cache
from abserve.model.provenance import BlockRecord, PrefixCacheCounts


def vllm_page(queries: dict[str, float], hits: dict[str, float]) -> str:
    """A ``/metrics`` page as vLLM's Prometheus counters write it: one label set per engine."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    q = Counter("vllm:prefix_cache_queries", "Prefix cache queries.", labels, registry=registry)
    h = Counter("vllm:prefix_cache_hits", "Prefix cache hits.", labels, registry=registry)
    other = Counter("vllm:external_prefix_cache_queries", "Connector queries.", labels, registry=registry)
    for engine, value in queries.items():
        q.labels("tiny llava {x}", engine).inc(value)
        other.labels("tiny llava {x}", engine).inc(999)
    for engine, value in hits.items():
        h.labels("tiny llava {x}", engine).inc(value)
    return generate_latest(registry).decode()


def test_counters_are_summed_over_engines_and_nothing_else_is_counted() -> None:
    page = vllm_page({"0": 1200, "1": 300}, {"0": 800, "1": 100})
    assert "vllm:prefix_cache_queries_total{" in page  # the _total and _created series are written
    assert "_created" in page
    assert parse_prefix_cache(page) == PrefixCacheCounts(queries=1500, hits=900)


def test_a_page_without_the_counters_is_none_and_bad_lines_are_skipped() -> None:
    assert parse_prefix_cache("# HELP x y\nprocess_cpu_seconds_total 3.0\n") is None
    page = "vllm:prefix_cache_hits not-a-number\nvllm:prefix_cache_queries 7 1700000\n"
    assert parse_prefix_cache(page) == PrefixCacheCounts(queries=7, hits=0)


def test_block_counts_keep_only_arms_that_counted_queries_both_times() -> None:
    before = {"a": PrefixCacheCounts(queries=100, hits=50), "b": PrefixCacheCounts(queries=100, hits=0),
              "c": None, "d": PrefixCacheCounts(queries=500, hits=400), "e": PrefixCacheCounts()}
    after = {"a": PrefixCacheCounts(queries=400, hits=250), "b": PrefixCacheCounts(queries=400, hits=0),
             "c": PrefixCacheCounts(queries=9, hits=9), "d": PrefixCacheCounts(queries=10, hits=0),
             "e": PrefixCacheCounts()}
    assert block_counts(before, after) == {"a": PrefixCacheCounts(queries=300, hits=200),
                                           "b": PrefixCacheCounts(queries=300, hits=0)}


def test_a_block_without_counts_writes_no_key_and_one_with_counts_round_trips() -> None:
    record = BlockRecord(index=0, requests=3)
    assert "prefix_cache" not in record.model_dump()
    record.prefix_cache = {"a": PrefixCacheCounts(queries=10, hits=4)}
    assert BlockRecord.model_validate(record.model_dump()).prefix_cache["a"].hits == 4


class _Metrics(BaseHTTPRequestHandler):
    pages: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path != "/metrics":
            self.send_error(404)
            return
        body = (self.pages.pop(0) if self.pages else "").encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def metrics_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Arm:
    def __init__(self, url: str) -> None:
        self.url = url


@pytest.mark.server
def test_a_block_reads_each_arm_before_and_after_over_http(metrics_url: str) -> None:
    _Metrics.pages[:] = [vllm_page({"0": 100}, {"0": 10}), vllm_page({"0": 700}, {"0": 410})]
    with BlockCacheReader({"a": _Arm(metrics_url), "x": _Arm("http://127.0.0.1:9")}) as cache:
        pass
    assert cache.counts == {"a": PrefixCacheCounts(queries=600, hits=400)}  # x: nothing listens there
    assert read_prefix_cache(metrics_url + "/nowhere") is None
