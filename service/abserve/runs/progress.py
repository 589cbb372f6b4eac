"""Live progress of a run: per arm, requests done, errors and mismatches so far.

A rich ``Live`` table refreshed from the router's own Prometheus ``/metrics`` once a
second by a background thread, so the display costs the router one cheap GET per second
and shows exactly what the router counted. The bar's total is the requests the run sends:
known at the start for a fixed plan (``planned_requests``); a sequential run's grows by each
block's requests as the block starts (``LiveProgress.expect``), so it never ends past it.
"""

from __future__ import annotations

import threading
from types import TracebackType

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

Counts = dict[str, dict[str, float]]  # arm -> {"requests", "errors", "mismatches"}

_FAMILIES = {
    "abserve_router_arm_requests": "requests",
    "abserve_router_arm_errors": "errors",
    "abserve_router_arm_mismatches": "mismatches",
}


def parse_counts(text: str, arms: list[str]) -> Counts:
    """Per-arm counters from Prometheus exposition text (samples summed over other labels)."""
    counts: Counts = {arm: {"requests": 0.0, "errors": 0.0, "mismatches": 0.0} for arm in arms}
    for family in text_string_to_metric_families(text):
        key = _FAMILIES.get(family.name)
        if key is None:
            continue
        for sample in family.samples:
            arm = sample.labels.get("arm")
            if arm in counts and sample.name.endswith("_total"):
                counts[arm][key] += sample.value
    return counts


def counts_table(counts: Counts) -> Table:
    table = Table(title="arms", expand=False)
    for column in ("arm", "requests", "errors", "mismatches"):
        table.add_column(column, justify="right" if column != "arm" else "left")
    for arm, c in counts.items():
        table.add_row(arm, f"{c['requests']:.0f}", f"{c['errors']:.0f}", f"{c['mismatches']:.0f}")
    return table


class LiveProgress:
    """Context manager showing a progress bar and the per-arm table while load runs."""

    def __init__(self, router_url: str, api_key: str, arms: list[str], total: int, console: Console) -> None:
        self.url = f"{router_url}/metrics"
        self.headers = {"authorization": f"Bearer {api_key}"}
        self.arms = arms
        self.bar = Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.task = self.bar.add_task("load", total=total)
        self.counts: Counts = parse_counts("", arms)
        self.live = Live(self._render(), console=console, refresh_per_second=2, transient=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="abserve-progress", daemon=True)

    def expect(self, requests: int) -> None:
        """Grow the bar's total by ``requests`` about to be sent (a sequential run's next block)."""
        total = self.bar.tasks[0].total or 0
        self.bar.update(self.task, total=total + requests)

    def _render(self) -> Table:
        grid = Table.grid()
        grid.add_row(self.bar)
        grid.add_row(counts_table(self.counts))
        return grid

    def _poll(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.wait(1.0):
                try:
                    text = client.get(self.url, headers=self.headers).text
                except httpx.HTTPError:
                    continue
                self.counts = parse_counts(text, self.arms)
                primary = self.counts[self.arms[0]]["requests"] if self.arms else 0
                self.bar.update(self.task, completed=primary)
                self.live.update(self._render())

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=3)
        self.live.__exit__(exc_type, exc, tb)
