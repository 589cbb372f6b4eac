"""The SQLite files under a runs folder: where ``abserve report`` finds a run's store and
``abserve ledger`` every store, without being told (``runs/<id>/abserve.db``,
``runs/latest/abserve.db``, ``runs/selftest/<experiment>/abserve.db``: at most ``MAX_DEPTH``
levels deep). Kept apart from ``abserve.report.locate`` so a reader that only lists stores does
not import the judgment.
"""

from __future__ import annotations

from pathlib import Path

MAX_DEPTH = 4


def sqlite_files(root: Path) -> list[Path]:
    """Every ``*.db`` file under ``root``, shallowest first, each level sorted."""
    found: list[Path] = []
    for depth in range(MAX_DEPTH + 1):
        found += sorted(p for p in root.glob("/".join(["*"] * depth + ["*.db"])) if p.is_file())
    return found
