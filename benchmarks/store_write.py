"""Record store write path: cost of ``BatchWriter.put`` on the request path, and throughput.

Builds realistic exchanges (two arms, ``--tokens`` output tokens each with top-5 logprobs
and per-token times), then:

1. times ``put`` (what the router pays per exchange) while the writer thread flushes;
2. measures sustained exchanges/s committed, and bytes per stored exchange (SQLite).

Usage: ``python -m benchmarks.store_write [--url sqlite:///tmp/b.db] [--n 2000] [--tokens 256]``
Results of the last run are in ``benchmarks/store_write.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from tests.support.records_factory import arm, exchange

from abserve.model.records import Exchange, RunInfo
from abserve.store import BatchWriter, Store


def make_exchange(run_id: str, i: int, tokens: int) -> Exchange:
    """Two arms of ``tokens`` output tokens, top-5 logprobs and a time per token each."""
    ids = list(range(1000, 1000 + tokens))
    arms = [arm(name, ids, ttft=0.05, itl=0.011, prompt_tokens=900) for name in ("a", "b")]
    return exchange(i, arms, run_id=run_id, profile="multi-image", items=4, started_at=time.time())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="abserve-store-bench-")
    url = args.url or f"sqlite:///{tmp}/bench.db"
    store = Store.open(url)
    run_id = f"bench-{int(time.time())}"
    store.create_run(RunInfo(run_id=run_id, started_at=time.time()))
    records = [make_exchange(run_id, i, args.tokens) for i in range(args.n)]

    writer = BatchWriter(store, run_id, flush_interval_s=0.5)
    writer.start()
    put_us = []
    t0 = time.perf_counter()
    for record in records:
        start = time.perf_counter_ns()
        writer.put(record)
        put_us.append((time.perf_counter_ns() - start) / 1000)
    writer.close()
    elapsed = time.perf_counter() - t0
    assert store.count_exchanges(run_id) == args.n

    put_us.sort()
    print(f"backend: {store.backend}, exchanges: {args.n}, tokens/arm: {args.tokens}")
    print(
        f"put(): p50 {statistics.median(put_us):.1f} us, "
        f"p99 {put_us[int(0.99 * len(put_us))]:.1f} us, max {put_us[-1]:.1f} us"
    )
    print(f"committed {args.n / elapsed:.0f} exchanges/s ({writer.flushes} flushes)")
    t1 = time.perf_counter()
    read = sum(1 for _ in store.iter_exchanges(run_id))
    print(f"read back {read / (time.perf_counter() - t1):.0f} exchanges/s")
    if store.backend == "sqlite":
        size = sum(os.path.getsize(f"{tmp}/{f}") for f in os.listdir(tmp))
        print(f"on disk: {size / args.n / 1024:.1f} KiB per exchange (db + wal)")
    store.close()


if __name__ == "__main__":
    main()
