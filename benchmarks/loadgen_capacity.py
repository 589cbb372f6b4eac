"""How many requests per second one Locust process sustains per traffic profile.

Runs ``run_load`` (one headless Locust process, closed loop, many users) against a fast local
upstream (the test fake with ``/tokenize``: no model, tokens streamed at once) and reports the
sustained send rate per profile, so a report can say whether the generator or the servers set
the pace. Usage: ``.venv/bin/python -m benchmarks.loadgen_capacity [--users 16]``; results go
to ``benchmarks/loadgen_capacity.md`` by hand (numbers of the last run).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from tests.support.fake_upstream import Knobs
from tests.support.tokenizing_upstream import TokenizingUpstream

from abserve.traffic.runner import LoadSpec, run_load
from abserve.traffic.timing import read_timings

# (profile, requests, overrides): counts sized so that each run takes seconds here.
CASES = [
    ("interleaved", 300, []),
    ("cache-reuse", 300, []),
    ("multi-image-long-context", 150, []),
    ("chunk-boundary", 150, ["chunk_boundary.max_num_batched_tokens=256"]),
    ("many-items", 40, []),
]


def measure(profile: str, n: int, overrides: list[str], users: int, url: str,
            out: Path) -> dict[str, float]:
    summary = run_load(LoadSpec(profile, url, requests=n, users=users, seed=1, run_id=f"cap-{profile}",
                       out_dir=out / profile, overrides=overrides, timeout_s=60))
    records = read_timings([summary.timings_path])
    start = min(r.sent_at for r in records)
    end = max(r.sent_at + (r.e2e_s or 0) for r in records)
    mib = statistics.mean(r.request_bytes for r in records) / 2**20
    return {"sent": summary.requests_sent, "failures": summary.failures,
            "rps": len(records) / (end - start), "mib": mib,
            "e2e_p50_ms": 1000 * statistics.median(r.e2e_s or 0 for r in records)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=16)
    args = parser.parse_args()
    print("| profile | requests | users | body MiB (mean) | sustained req/s | e2e p50 ms |")
    print("|---|---|---|---|---|---|")
    with TokenizingUpstream(Knobs(n_tokens=16)) as up, tempfile.TemporaryDirectory() as tmp:
        for profile, n, overrides in CASES:
            r = measure(profile, n, overrides, args.users, up.url, Path(tmp))
            up.observed.bodies.clear()
            up.arrivals.clear()
            print(f"| {profile} | {r['sent']:.0f} ({r['failures']:.0f} failed) | {args.users} | "
                  f"{r['mib']:.2f} | {r['rps']:.0f} | {r['e2e_p50_ms']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
