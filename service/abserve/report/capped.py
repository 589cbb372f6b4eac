"""What keeps the report of a huge run readable: tables capped, charts binned, with a count.

A soak of tens of thousands of requests over hundreds of rounds would otherwise give the
HTML and Markdown reports one row per round and per block, one bar per output position and
one band vertex per look. Above a threshold each such table or chart shows a summary instead
(rows evenly spaced over the run with every change of outcome kept, positions binned into
ranges, every k-th look drawn) and says how much was left out; at or below the threshold it
is exactly what it was. ``report.json`` stays complete (it is the judgment model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

if TYPE_CHECKING:
    from abserve.compare.model import BreakdownRow

T = TypeVar("T")
MAX_ROWS = 60  # rows of a table that grows with the run (rounds of the sequential log)
MAX_BLOCK_ROWS = 24  # block rows per metric in the breakdowns table
MAX_BARS = 40  # bars of a chart over output positions
MAX_LISTED = 48  # items of an inline list (image hashes of a request, positions)


@dataclass(frozen=True)
class Capped(Generic[T]):
    """The items shown and how many were left out (0: all shown)."""

    shown: list[T] = field(default_factory=list)
    left_out: int = 0

    def note(self, what: str) -> str:
        """``"1,234 more rounds not shown"``, or empty when nothing was left out."""
        return f"{self.left_out:,} more {what} not shown" if self.left_out else ""


def evenly(items: Sequence[T], limit: int) -> Capped[T]:
    """At most ``limit`` of ``items`` evenly spaced from the first to the last, in order."""
    if len(items) <= limit:
        return Capped(list(items))
    picks = sorted(set(np.linspace(0, len(items) - 1, limit).round().astype(int).tolist()))
    return Capped([items[i] for i in picks], len(items) - len(picks))


def changes_kept(items: Sequence[T], limit: int, key: Callable[[T], object]) -> Capped[T]:
    """At most ``limit`` of ``items``, in order: the first, the last and each whose ``key``
    differs from the one before (evenly spaced among them if they are more), then evenly spaced
    others up to ``limit``."""
    if len(items) <= limit:
        return Capped(list(items))
    marked = [0, len(items) - 1] + [i for i in range(1, len(items)) if key(items[i]) != key(items[i - 1])]
    keep = sorted(set(marked))
    if len(keep) > limit:
        keep = evenly(keep, limit).shown
    else:
        rest = [i for i in range(len(items)) if i not in set(keep)]
        keep = sorted(keep + evenly(rest, limit - len(keep)).shown) if limit > len(keep) else keep
    return Capped([items[i] for i in keep], len(items) - len(keep))


def binned(counts: Mapping[str, float], limit: int = MAX_BARS) -> dict[str, float]:
    """``counts`` over integer labels (output positions), as is up to ``limit`` labels; above,
    summed into ``limit`` equal ranges ``"lo-hi"`` of the labels' span (empty ranges kept, so
    the x axis stays linear)."""
    if len(counts) <= limit:
        return dict(counts)
    keys = {int(k): v for k, v in counts.items()}
    lo, hi = min(keys), max(keys)
    width = -(-(hi - lo + 1) // limit)  # ceil
    out: dict[str, float] = {}
    for start in range(lo, hi + 1, width):
        end = min(start + width - 1, hi)
        out[f"{start}-{end}"] = float(sum(v for k, v in keys.items() if start <= k <= end))
    return out


def first(items: Sequence[T] | Mapping[T, object], limit: int = MAX_LISTED) -> Capped[T]:
    """The first ``limit`` of ``items`` (a mapping's keys), and how many more there are."""
    listed = list(items)
    return Capped(listed[:limit], max(len(listed) - limit, 0))


def breakdown_rows(rows: Sequence[BreakdownRow], limit: int = MAX_BLOCK_ROWS) -> Capped[BreakdownRow]:
    """The breakdowns table's rows: every profile and items row; of each metric's block rows
    (one per block: a soak has hundreds) at most ``limit``, evenly spaced over the run."""
    blocks: dict[str, list[BreakdownRow]] = {}
    for row in rows:
        if row.dimension == "block":
            blocks.setdefault(row.metric, []).append(row)
    kept = {id(row) for group in blocks.values() for row in evenly(group, limit).shown}
    shown = [row for row in rows if row.dimension != "block" or id(row) in kept]
    return Capped(shown, len(rows) - len(shown))


def long_lists_cut(value: object, limit: int = MAX_ROWS) -> object:
    """``value`` (the provenance: free-form JSON) with each list longer than ``limit`` cut to
    its first and last items around one string saying how many were left out (a soak's
    provenance holds a record per block and per look)."""
    if isinstance(value, dict):
        return {k: long_lists_cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        items = [long_lists_cut(v, limit) for v in value]
        if len(items) <= limit:
            return items
        head, tail = limit // 2, limit - limit // 2 - 1
        left = len(items) - head - tail
        return [*items[:head], f"... {left:,} more not shown (report.json has every one) ...",
                *items[len(items) - tail:]]
    return value
