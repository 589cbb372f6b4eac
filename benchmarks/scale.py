"""How ``abserve report`` grows with a run's size: time, peak memory and store size.

Shape (issue 30): 3 arms (a, b, a2), 64 output tokens, top-5 logprobs per position, one
``-inf`` candidate per arm so the constants path is exercised, a mismatching candidate on
every 997th exchange, noisy per-token times. Rows are made by the store's own
``exchange_row`` (one arm template per arm, copied with each exchange's times, then packed
as the router packs a record) and bulk inserted through the store's own ``insert_rows``;
then ``abserve report RUN --db ... --policy configs/policy/gpu.yaml`` runs as a child process,
timed, its CPU time and peak RSS read from its own rusage (``os.wait4``).

Run from the repository root:
``.venv/bin/python -m benchmarks.scale 1000 10000 [--pg URL] [--keep DIR]``; prints a
Markdown table with the slopes between points (ms and KiB per exchange) and appends nothing
by itself: copy what it printed into ``benchmarks/scale.md``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from tests.support.records_factory import arm, position, run_info

from abserve.model.records import ArmOutcome, Exchange
from abserve.store import Store
from abserve.store.rows import Row, exchange_row

ROOT = Path(__file__).resolve().parents[1]

TOKENS = list(range(100, 164))
ARMS = ("a", "b", "a2")
BATCH = 2000
RUN_ID = "scale-1"


def _template(name: str, tokens: list[int]) -> ArmOutcome:
    """An arm of the benchmark's shape; its times are set per exchange."""
    lps = [position(t) for t in tokens]
    lps[3].top[-1].logprob = float("-inf")
    return arm(name, tokens, logprobs=lps)


def _timed(template: ArmOutcome, times: np.ndarray) -> ArmOutcome:
    listed = times.tolist()
    return template.model_copy(update={"token_times": listed, "t_first_token": listed[0],
                                       "t_end": listed[-1] + 0.001})


def rows(n: int, seed: int = 0) -> list[Row]:
    """``n`` rows of the benchmark's shape, made by the router's own ``exchange_row`` (the
    columnar record: each exchange packed with its own times)."""
    rng = np.random.default_rng(seed)
    same = {a: _template(a, TOKENS) for a in ARMS}
    bad = _template("b", [*TOKENS[:10], 7, *TOKENS[11:]])
    base = Exchange(run_id=RUN_ID, request_id="x", endpoint="chat/completions",
                    stream=True, fingerprint="fp", started_at=0.0, arms={})
    out = []
    for i in range(n):
        arms = {}
        for a in ARMS:
            gaps = 0.01 + rng.normal(0, 0.0004, len(TOKENS) - 1)
            times = np.concatenate(([0.05 + rng.normal(0, 0.002)], gaps)).cumsum()
            arms[a] = _timed(bad if a == "b" and i % 997 == 996 else same[a], times)
        ex = base.model_copy(update={"request_id": f"req-{i:07d}", "started_at": 1_000.0 + i * 0.1,
                                     "fingerprint": f"fp-{i}", "arms": arms,
                                     "tags": {"profile": "chat", "items": str(1 + i % 8)}})
        out.append(exchange_row(ex))
    return out


def fill(db: str, n: int) -> float:
    """Create the run and ``n`` exchanges in the store at ``db``; seconds taken."""
    t0 = time.perf_counter()
    with Store.open(db) as store:
        info = run_info(run_id=RUN_ID)
        store.create_run(info)
        for start in range(0, n, BATCH):
            batch = rows(min(BATCH, n - start), seed=start)
            for k, row in enumerate(batch):
                row["request_id"] = f"req-{start + k:07d}"
                row["started_at"] = 1_000.0 + (start + k) * 0.1
            with store.engine.begin() as conn:
                store.insert_rows(conn, batch)
        store.finish_run(RUN_ID, "completed")
    return time.perf_counter() - t0


def report(db: str, out: Path) -> tuple[float, float, float, int]:
    """Run ``abserve report``: seconds, CPU seconds (user + system), peak RSS in MiB, exit code."""
    cmd = [str(ROOT / ".venv/bin/abserve"), "report", RUN_ID, "--db", db, "--out", str(out),
           "--policy", str(ROOT / "configs/policy/gpu.yaml")]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def store_bytes(db: str, path: Path | None) -> int:
    if path is not None:
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    import sqlalchemy as sa

    engine = sa.create_engine(db.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        size = conn.execute(sa.text("select pg_total_relation_size('abserve_exchanges')")).scalar_one()
    engine.dispose()
    return int(size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--pg", help="PostgreSQL URL (an empty database) instead of SQLite")
    parser.add_argument("--keep", type=Path, help="keep the stores and reports here")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="abserve-scale-"))
    lines = ["| exchanges | backend | fill s | report s | report CPU s | peak RSS MiB | store KB/exchange "
             "| exit |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    points = []
    for n in args.sizes:
        path = None if args.pg else base / f"scale-{n}.db"
        db = args.pg or f"sqlite:///{path}"
        filled = fill(db, n)
        seconds, cpu, rss, code = report(db, base / f"report-{n}")
        size = store_bytes(db, path) / n / 1000
        points.append((n, seconds, cpu, rss))
        lines.append(f"| {n:,} | {'postgresql' if args.pg else 'sqlite'} | {filled:.0f} | {seconds:.1f} "
                     f"| {cpu:.1f} | {rss:.0f} | {size:.1f} | {code} |")
        print(lines[-1], flush=True)
        if path is not None and args.keep is None:
            for p in path.parent.glob(path.name + "*"):
                p.unlink()
    lines += ["", "| from | to | ms per exchange | CPU ms per exchange | KiB RSS per exchange |",
              "|---:|---:|---:|---:|---:|"]
    for (n0, s0, c0, r0), (n1, s1, c1, r1) in itertools.pairwise(points):
        per_ms, per_cpu = (s1 - s0) / (n1 - n0) * 1000, (c1 - c0) / (n1 - n0) * 1000
        per_kib = (r1 - r0) * 1024 / (n1 - n0)
        lines.append(f"| {n0:,} | {n1:,} | {per_ms:.3f} | {per_cpu:.3f} | {per_kib:.2f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
