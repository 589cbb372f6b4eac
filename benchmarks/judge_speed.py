"""How long the judgment and the report take for runs of realistic size (synthetic records).

Run: ``.venv/bin/python -m benchmarks.judge_speed`` from the repository root; prints a Markdown
table and writes it to ``benchmarks/judge_speed.md``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests.support.records_factory import ab_run, run_info

from abserve.compare import judge, load_policy
from abserve.report import write_report

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    policy = load_policy(ROOT / "configs/policy/default.yaml")
    rows = [
        "| exchanges (3 arms, 8 tokens) | judge s | write_report s | report.html KiB |",
        "|---:|---:|---:|---:|",
    ]
    for n in (500, 2000, 5000):
        runs = ab_run(n, itl_shift=0.0005)
        t0 = time.perf_counter()
        j = judge(run_info(), runs, policy)
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_report(j, tmp)
            t2 = time.perf_counter()
            size = paths.html.stat().st_size / 1024
        rows.append(f"| {n} | {t1 - t0:.2f} | {t2 - t1:.2f} | {size:.0f} |")
    table = "\n".join(rows)
    print(table)
    (ROOT / "benchmarks/judge_speed.md").write_text(
        "# Judgment and report speed\n\nLast run of `benchmarks/judge_speed.py` on the 2-core "
        "shared development machine (default policy: 6 latency rules, 2000 bootstrap resamples "
        "for each percentile rule).\n\n" + table + "\n"
    )


if __name__ == "__main__":
    main()
