"""The look paths of a long run before and after ``compare.prefix_order`` (issue 30), one process.

A quantile path (``quantile_cs.quantile_path``) and a coefficient path (``ols_path.running_path``
with winsorizing, its ``SortedPrefix``) over ``n`` values looked at every 16, timed with the
old sorted prefix grown by ``np.insert`` (the references kept in
``tests/unit/compare/test_prefix_order.py``) and with the new order, and checked equal bit for
bit. Run from the repository root:
``PYTHONPATH=service:. .venv/bin/python -m benchmarks.prefix_paths 100000 1000000``; prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from unittest import mock

import numpy as np
from tests.unit.compare.test_prefix_order import OldPrefixForRunningPath, old_quantile_path

from abserve.compare.quantile_cs import quantile_path
from abserve.compare.stats import ols_path
from abserve.compare.stats.anytime import Interval

EVERY = 16


def _timed(work: Callable[[], list]) -> tuple[float, list]:
    t0 = time.process_time()
    out = work()
    return time.process_time() - t0, out


def _direct(m: int) -> Interval:
    return Interval(float(m), -math.inf, math.inf)


def bench(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    latency = rng.lognormal(-3.0, 0.3, n)  # a per-request difference's shape: a long right tail
    y = 0.001 * rng.standard_normal(n)
    y[rng.integers(0, n, n // 200)] += 0.05  # interference spikes, winsorized
    x = np.column_stack([np.ones(n), rng.integers(0, 2, n), np.arange(n) / n])
    looks = [*range(EVERY, n, EVERY), n]
    rows = []
    for name, old, new in (
        ("quantile path p99", lambda: old_quantile_path(latency, looks, 0.99, 0.05),
         lambda: quantile_path(latency, looks, 0.99, 0.05)),
        ("coefficient path (shift, clip 5)", lambda: _old_coefficient(y, x, looks),
         lambda: ols_path.running_path(y, x, looks, 0, 5.0, 0.05, 1.0, _direct)),
    ):
        after, fresh = _timed(new)
        before, kept = _timed(old)
        assert repr(fresh) == repr(kept), name
        rows.append(f"| {name} | {n:,} | {len(looks):,} | {before:.2f} | {after:.2f} "
                    f"| {before / after:.1f} |")
        print(rows[-1], flush=True)
    return rows


def _old_coefficient(y: np.ndarray, x: np.ndarray, looks: list[int]) -> list[Interval]:
    with mock.patch.object(ols_path, "SortedPrefix", OldPrefixForRunningPath):
        return ols_path.running_path(y, x, looks, 0, 5.0, 0.05, 1.0, _direct)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=int, nargs="+")
    args = parser.parse_args()
    print("| path | values | looks | before CPU s | after CPU s | x |\n|---|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        bench(n)


if __name__ == "__main__":
    main()
