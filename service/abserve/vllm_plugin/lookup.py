"""The two multimodal window lookups under comparison, their work counts, and their precondition.

vLLM's ``get_mm_features_in_window(mm_features, start, end) -> (lo, hi)`` (PR #44212) returns the
index range of the multimodal items that overlap the half-open token window ``[start, end)``:
``lo`` is the first item whose end (``offset + length``) is past ``start`` and ``hi`` the first
item whose ``offset`` is at or after ``end``; callers loop ``range(lo, hi)``. It is written as two
``bisect_left`` calls and assumes the items are sorted by offset and do not overlap.

- :func:`bisect_window` is that helper, re-stated (arm ``b``).
- :func:`linear_window` is the linear scan it replaced (arm ``a``): walk to the first item that
  ends after ``start``, stop early at an item starting at or after ``end``, then extend ``hi``
  while offsets are below ``end``. It returns exactly the bisect pair whenever both the offsets
  and the ends are non-decreasing (sorted, non-overlapping input is one such case), for any
  window, degenerate or inverted ones included.
- :func:`hybrid_window` is abserve's own candidate: the linear scan for lists of fewer than
  ``HYBRID_THRESHOLD`` items (where a scan beats two binary searches), bisect from there on.
  It equals vLLM's helper on the helper's documented input (and wherever offsets and ends are
  non-decreasing). The threshold is measured (``benchmarks/hybrid_threshold.py``) and can be
  overridden per process with ``ABSERVE_MM_HYBRID_THRESHOLD`` or per call site with
  :func:`make_hybrid`.
- :func:`linear_examined` and :func:`bisect_probes` count the work a call did from its result
  alone (exactly, with no instrumentation inside the lookup), so a caller can time the bare
  lookup and count afterwards; :func:`linear_window_counted` / :func:`bisect_window_counted`
  bundle the two.
- :func:`check_window_preconditions` names the first item that breaks the helper's assumption.

Standard library only: the vLLM plugin imports this module inside every vLLM server process.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "HYBRID_THRESHOLD",
    "HYBRID_THRESHOLD_ENV",
    "LOOKUPS",
    "Feature",
    "Position",
    "ViolationKind",
    "WindowLookup",
    "WindowViolation",
    "bisect_probes",
    "bisect_window",
    "bisect_window_counted",
    "check_window_preconditions",
    "hybrid_examined",
    "hybrid_threshold",
    "hybrid_window",
    "linear_examined",
    "linear_window",
    "linear_window_counted",
    "make_hybrid",
]

# Items from which the hybrid lookup bisects instead of scanning. Measured with
# benchmarks/hybrid_threshold.py on real vLLM feature objects (vLLM 0.32, this 2-core machine):
# summing a decode-step call (window past every item, the scan's worst case; crossover 10) and a
# mid-prompt chunk (crossover 16-20), vLLM's helper is faster from 12 items on, in both runs
# (benchmarks/hybrid_threshold.md).
HYBRID_THRESHOLD = 12
HYBRID_THRESHOLD_ENV = "ABSERVE_MM_HYBRID_THRESHOLD"


class Position(Protocol):
    """What the lookups read of vLLM's ``PlaceholderRange``."""

    @property
    def offset(self) -> int: ...

    @property
    def length(self) -> int: ...


class Feature(Protocol):
    """What the lookups read of vLLM's ``MultiModalFeatureSpec``."""

    @property
    def mm_position(self) -> Position: ...


def _end_key(feature: Feature) -> int:
    pos = feature.mm_position
    return pos.offset + pos.length


def _offset_key(feature: Feature) -> int:
    return feature.mm_position.offset


def bisect_window(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
    """``(lo, hi)`` of the items overlapping ``[start, end)`` by two binary searches, as vLLM."""
    lo = bisect.bisect_left(features, start + 1, key=_end_key)
    hi = bisect.bisect_left(features, end, key=_offset_key)
    return lo, hi


def linear_window(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
    """``(lo, hi)`` of the items overlapping ``[start, end)`` by a forward scan.

    Equal to :func:`bisect_window` whenever offsets and ends are both non-decreasing.
    """
    for i, feature in enumerate(features):
        pos = feature.mm_position
        offset = pos.offset
        if offset >= end:
            # Nothing from here on starts inside the window. Only a degenerate or inverted window
            # (end <= start) can leave items from i on that still end at or before start.
            return _first_ending_after(features, i, start), i
        if offset + pos.length > start:
            hi = i + 1
            n = len(features)
            while hi < n and features[hi].mm_position.offset < end:
                hi += 1
            return i, hi
    n = len(features)
    return n, n


def _first_ending_after(features: Sequence[Feature], i: int, start: int) -> int:
    n = len(features)
    while i < n and _end_key(features[i]) <= start:
        i += 1
    return i


def hybrid_threshold() -> int:
    """The threshold in force: ``ABSERVE_MM_HYBRID_THRESHOLD`` when set, else the measured one."""
    raw = os.environ.get(HYBRID_THRESHOLD_ENV, "").strip()
    if not raw:
        return HYBRID_THRESHOLD
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{HYBRID_THRESHOLD_ENV}={raw!r}: expected a whole number of items") from None
    if value < 0:
        raise ValueError(f"{HYBRID_THRESHOLD_ENV}={value}: expected 0 or more items")
    return value


Window = Callable[[Sequence[Feature], int, int], tuple[int, int]]


def make_hybrid(threshold: int, bisector: Window = bisect_window) -> Window:
    """A hybrid lookup: ``linear_window`` below ``threshold`` items, ``bisector`` from there on
    (``bisector`` is vLLM's own helper inside a server, so only the scan is abserve's code)."""

    def hybrid(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
        if len(features) < threshold:
            return linear_window(features, start, end)
        return bisector(features, start, end)

    hybrid.__name__ = hybrid.__qualname__ = "hybrid_window"
    return hybrid


def hybrid_window(features: Sequence[Feature], start: int, end: int) -> tuple[int, int]:
    """``(lo, hi)`` of the items overlapping ``[start, end)``: scan below the threshold, else bisect.

    Equal to vLLM's helper whenever offsets and ends are both non-decreasing."""
    if len(features) < hybrid_threshold():
        return linear_window(features, start, end)
    return bisect_window(features, start, end)


def hybrid_examined(num_items: int, lo: int, hi: int, threshold: int | None = None) -> int:
    """Work :func:`hybrid_window` did: items scanned below the threshold, key probes above."""
    limit = hybrid_threshold() if threshold is None else threshold
    if num_items < limit:
        return linear_examined(num_items, lo, hi)
    return bisect_probes(num_items, lo, hi)


def linear_examined(num_items: int, lo: int, hi: int) -> int:
    """Distinct items :func:`linear_window` read to return ``(lo, hi)`` over ``num_items`` items.

    The scan reads items ``0..max(lo, hi)``, the last one only when it exists.
    """
    return min(max(lo, hi) + 1, num_items)


def _bisect_left_probes(num_items: int, result: int) -> int:
    """Key probes ``bisect_left`` made over ``num_items`` items to return ``result``.

    Each probe at ``mid`` went right exactly when ``mid < result``, so the result fixes the path,
    whether or not the keys were sorted.
    """
    lo, hi, probes = 0, num_items, 0
    while lo < hi:
        mid = (lo + hi) // 2
        probes += 1
        if mid < result:
            lo = mid + 1
        else:
            hi = mid
    return probes


def bisect_probes(num_items: int, lo: int, hi: int) -> int:
    """Key probes :func:`bisect_window` (or vLLM's helper) made to return ``(lo, hi)``."""
    return _bisect_left_probes(num_items, lo) + _bisect_left_probes(num_items, hi)


def linear_window_counted(features: Sequence[Feature], start: int, end: int) -> tuple[int, int, int]:
    """:func:`linear_window` plus the number of items it examined."""
    lo, hi = linear_window(features, start, end)
    return lo, hi, linear_examined(len(features), lo, hi)


def bisect_window_counted(features: Sequence[Feature], start: int, end: int) -> tuple[int, int, int]:
    """:func:`bisect_window` plus the number of key probes it made."""
    lo, hi = bisect_window(features, start, end)
    return lo, hi, bisect_probes(len(features), lo, hi)


@dataclass(frozen=True)
class WindowLookup:
    """A named lookup and the function that counts its work from ``(num_items, lo, hi)``."""

    name: str
    window: Callable[[Sequence[Feature], int, int], tuple[int, int]]
    work: Callable[[int, int, int], int]


LOOKUPS: dict[str, WindowLookup] = {
    "linear": WindowLookup("linear", linear_window, linear_examined),
    "bisect": WindowLookup("bisect", bisect_window, bisect_probes),
    "hybrid": WindowLookup("hybrid", hybrid_window, hybrid_examined),
}


ViolationKind = Literal[
    "negative_length", "zero_length", "unsorted_offsets", "non_monotone_ends", "overlapping_spans"
]


@dataclass(frozen=True)
class WindowViolation:
    """The first item that breaks the lookups' precondition, and how."""

    index: int
    kind: ViolationKind
    detail: str

    def __str__(self) -> str:
        return f"item {self.index}: {self.kind.replace('_', ' ')} ({self.detail})"


def check_window_preconditions(features: Sequence[Feature]) -> WindowViolation | None:
    """The first violation of "sorted by offset, non-overlapping, non-empty spans", or None.

    Items are checked in order; at one index the most harmful kind wins: a negative or zero
    length, then offsets going backwards, then ends going backwards (bisect can then miss an
    item), then a span starting before the previous one ended (identical spans included).
    """
    prev_offset = prev_end = 0
    for i, feature in enumerate(features):
        pos = feature.mm_position
        offset, length = pos.offset, pos.length
        end = offset + length
        span = f"offset {offset}, length {length}"
        if length < 0:
            return WindowViolation(i, "negative_length", span)
        if length == 0:
            return WindowViolation(i, "zero_length", span)
        if i > 0:
            if offset < prev_offset:
                detail = f"offset {offset} < previous offset {prev_offset}"
                return WindowViolation(i, "unsorted_offsets", detail)
            if end < prev_end:
                return WindowViolation(i, "non_monotone_ends", f"end {end} < previous end {prev_end}")
            if offset < prev_end:
                detail = f"offset {offset} < previous end {prev_end}"
                return WindowViolation(i, "overlapping_spans", detail)
        prev_offset, prev_end = offset, end
    return None
