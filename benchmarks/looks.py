"""What the k-th look of a sequential run costs: a fresh read of the whole run against an
incremental look (``abserve.runs.looks.IncrementalLooks``).

A run of ``rounds`` rounds of ``per_round`` exchanges each, of ``benchmarks.scale``'s shape
(3 arms, 64 output tokens, top-5 logprobs, a mismatching candidate every 997th exchange), is
written round by round into a SQLite store. After each round the incremental look reads and
digests the new rows; at the looks named by ``--at`` a fresh look also reads and digests the
whole run (what a look cost before: a new ``Digester`` fed ``Store.iter_raw_exchanges``), and
the interim judgment of the digest (``launch.rounds.interim_judgment``, the same work both
ways) is timed. Both digests are checked to hold the same exchanges.

Run from the repository root:
``.venv/bin/python -m benchmarks.looks 10 1000 --at 1 5 10``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.scale import RUN_ID, rows
from tests.support.records_factory import run_info

from abserve.compare import load_policy
from abserve.compare.digest import Digester
from abserve.runs.looks import IncrementalLooks
from abserve.runs.rounds import interim_judgment
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[1]


def write_round(store: Store, start: int, count: int) -> None:
    batch = rows(count, seed=start)
    for k, row in enumerate(batch):
        row["request_id"] = f"req-{start + k:07d}"
        row["started_at"] = 1_000.0 + (start + k) * 0.1
    with store.engine.begin() as conn:
        store.insert_rows(conn, batch)


def timed_fresh_look(store: Store, looks: IncrementalLooks) -> float:
    t0 = time.perf_counter()
    fresh = Digester(looks.policy)
    fresh.feed_raw(store.iter_raw_exchanges(RUN_ID))
    seconds = time.perf_counter() - t0
    if set(fresh.slim) != set(looks.digest.slim):
        raise SystemExit("the incremental digest holds other exchanges than a fresh read")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", type=int)
    parser.add_argument("per_round", type=int)
    parser.add_argument("--at", type=int, nargs="+", default=[1], help="looks to time both ways")
    args = parser.parse_args()
    policy = load_policy(ROOT / "configs/policy/gpu.yaml")
    print("| look | exchanges | fresh read + digest s | incremental read + digest s | judgment s |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="abserve-looks-") as tmp, \
            Store.open(f"sqlite:///{Path(tmp) / 'looks.db'}") as store:
        store.create_run(run_info(run_id=RUN_ID))
        looks = IncrementalLooks(policy)
        for k in range(1, args.rounds + 1):
            write_round(store, (k - 1) * args.per_round, args.per_round)
            t0 = time.perf_counter()
            looks.update(store, RUN_ID)
            incremental = time.perf_counter() - t0
            if k not in args.at:
                continue
            fresh = timed_fresh_look(store, looks)
            run = store.get_run(RUN_ID)
            assert run is not None
            t0 = time.perf_counter()
            interim_judgment(run, looks.digest, policy)
            judged = time.perf_counter() - t0
            print(f"| {k} | {len(looks.digest):,} | {fresh:.2f} | {incremental:.2f} | {judged:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
