"""Child process of the crash test: writes exchanges through a BatchWriter until killed.

Usage (from the repository root): ``python -m tests.unit.store.crash_writer DATABASE_URL RUN_ID``.
Prints ``ack N`` whenever the writer's count of committed exchanges grows, so the parent knows
what was acknowledged.
"""

from __future__ import annotations

import sys
import time

from tests.support.records_factory import full_exchange as exchange
from tests.support.records_factory import full_run_info as run_info

from abserve.store import BatchWriter, Store


def main(database_url: str, run_id: str) -> None:
    store = Store.open(database_url)
    store.create_run(run_info(run_id))
    writer = BatchWriter(store, run_id, flush_interval_s=0.05)
    writer.start()
    acked, i = 0, 0
    while True:
        writer.put(exchange(run_id, i))
        i += 1
        if writer.written != acked:
            acked = writer.written
            print(f"ack {acked}", flush=True)
        time.sleep(0.0005)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
