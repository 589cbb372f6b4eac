"""Per-group test times from the lanes' junit XML (``scripts/test.sh`` prints this table).

A group is a test folder (``tests/unit/compare``, ``tests/e2e``...); its time is the sum of
its tests' own times, so a slow group shows however the lanes overlapped. Copied into
``benchmarks/ci_time.md`` after a CI-like run.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def group_of(classname: str) -> str:
    """``tests.unit.compare.test_x`` -> ``tests/unit/compare``."""
    parts = classname.split(".")
    modules = [i for i, p in enumerate(parts) if p.startswith("test_")]
    folder = parts[: modules[0]] if modules else parts[:-1]
    return "/".join(folder) or "."


def group_times(files: list[Path]) -> dict[str, tuple[int, float]]:
    """Group -> (tests, seconds) over every testcase of ``files``."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for path in files:
        for case in ET.parse(path).getroot().iter("testcase"):
            file = case.get("file")  # junit_family=xunit1 (scripts/test.sh) records it
            group = str(Path(file).parent) if file else group_of(case.get("classname", ""))
            entry = totals[group]
            entry[0] += 1
            entry[1] += float(case.get("time", 0.0))
    return {g: (int(n), s) for g, (n, s) in totals.items()}


def table(times: dict[str, tuple[int, float]]) -> str:
    rows = ["| group | tests | seconds |", "|---|---:|---:|"]
    for group, (n, seconds) in sorted(times.items(), key=lambda kv: -kv[1][1]):
        rows.append(f"| {group} | {n} | {seconds:.0f} |")
    total_n, total_s = sum(n for n, _ in times.values()), sum(s for _, s in times.values())
    rows.append(f"| all | {total_n} | {total_s:.0f} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv if Path(a).is_file()]
    if not files:
        print("no junit XML to summarise", file=sys.stderr)
        return 1
    print(table(group_times(files)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
