"""abserve.vllm_plugin.lookup against vLLM's own window helper: properties and pinned edge cases.

Features are built from vLLM's real ``PlaceholderRange``; the helper reads only
``feature.mm_position.offset`` / ``.length``, so the feature itself is a small stand-in (one test
uses vLLM's real ``MultiModalFeatureSpec``). The edge-case table pins what each function really
returns today, including the cases where they are wrong, so any change to either shows up here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm.multimodal import utils as vllm_utils
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

from abserve.vllm_plugin.lookup import (
    LOOKUPS,
    WindowViolation,
    bisect_probes,
    bisect_window,
    bisect_window_counted,
    check_window_preconditions,
    hybrid_examined,
    hybrid_threshold,
    hybrid_window,
    linear_examined,
    linear_window,
    linear_window_counted,
    make_hybrid,
)

# imports torch and vLLM: make test runs it, make test-fast does not even collect it
pytestmark = pytest.mark.slow

# vLLM types its helper for its own feature class; it reads only ``mm_position``.
get_mm_features_in_window: Callable[..., tuple[int, int]] = vllm_utils.get_mm_features_in_window

Spans = Sequence[tuple[int, int]]  # (offset, length) per item


@dataclass(frozen=True)
class Feat:
    mm_position: PlaceholderRange


def feats(spans: Spans) -> list[Feat]:
    return [Feat(PlaceholderRange(offset=o, length=n)) for o, n in spans]


def old_loop(spans: Spans, start: int, end: int) -> list[int]:
    """The per-item filter vLLM ran before #44212 (what callers then selected)."""
    selected = []
    for i, (offset, length) in enumerate(spans):
        if offset >= end:
            break
        if offset + length <= start:
            continue
        selected.append(i)
    return selected


# --- strategies -----------------------------------------------------------------------------


@st.composite
def sorted_disjoint(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Sorted, non-overlapping items with positive length (the helper's documented input)."""
    gaps_lengths = draw(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 8)), max_size=40))
    spans, pos = [], draw(st.integers(0, 5))
    for gap, length in gaps_lengths:
        pos += gap
        spans.append((pos, length))
        pos += length
    return spans


@st.composite
def monotone(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Offsets and ends both non-decreasing; overlaps, identical spans and zero lengths allowed."""
    steps = draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6)), max_size=40))
    spans, offset, prev_end = [], 0, 0
    for step, extra in steps:
        offset += step
        end = max(prev_end, offset) + extra
        spans.append((offset, end - offset))
        prev_end = end
    return spans


@st.composite
def window(draw: st.DrawFn, spans: Spans, ordered: bool = True) -> tuple[int, int]:
    """A window anywhere, often on or next to an item boundary; unordered allows end < start."""
    edges = sorted({e + d for o, n in spans for e in (o, o + n) for d in (-1, 0, 1)} | {0})
    top = max(edges) + 3
    point = st.one_of(st.sampled_from(edges), st.integers(-3, top))
    start = draw(point)
    if not ordered:
        return start, draw(point)
    return start, start + draw(st.one_of(st.integers(0, 3), st.integers(0, top + 3)))


@st.composite
def case(
    draw: st.DrawFn, items: st.SearchStrategy[list[tuple[int, int]]], ordered: bool = True
) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    spans = draw(items)
    return spans, draw(window(spans, ordered))


# any input at all: unsorted, overlapping, zero lengths, any window
ANY_SPANS = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), max_size=40)
ANY_POINT = st.integers(-2, 45)


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(case(sorted_disjoint()))
def test_both_agree_with_vllm_on_sorted_disjoint(c: tuple[Spans, tuple[int, int]]) -> None:
    spans, (start, end) = c
    f = feats(spans)
    expected = get_mm_features_in_window(f, start, end)
    assert bisect_window(f, start, end) == expected
    assert linear_window(f, start, end) == expected
    assert hybrid_window(f, start, end) == expected
    assert check_window_preconditions(f) is None
    lo, hi = expected
    assert list(range(lo, hi)) == old_loop(spans, start, end)  # sane input: all three select alike


@settings(max_examples=400, deadline=None)
@given(case(monotone(), ordered=False))
def test_linear_equals_vllm_whenever_offsets_and_ends_are_monotone(
    c: tuple[Spans, tuple[int, int]],
) -> None:
    """Stronger than the contract: overlaps, zero lengths and inverted windows included."""
    spans, (start, end) = c
    f = feats(spans)
    assert linear_window(f, start, end) == get_mm_features_in_window(f, start, end)


@settings(max_examples=300, deadline=None)
@given(ANY_SPANS, ANY_POINT, ANY_POINT)
def test_bisect_equals_vllm_on_any_input(spans: Spans, start: int, end: int) -> None:
    """bisect_window is vLLM's helper re-stated: equal even on unsorted, overlapping input."""
    f = feats(spans)
    assert bisect_window(f, start, end) == get_mm_features_in_window(f, start, end)


class Probe:
    """A feature that logs its index whenever its position is read."""

    def __init__(self, index: int, offset: int, length: int, log: list[int]) -> None:
        self._index, self._log = index, log
        self._pos = PlaceholderRange(offset=offset, length=length)

    @property
    def mm_position(self) -> PlaceholderRange:
        self._log.append(self._index)
        return self._pos


def probes(spans: Spans) -> tuple[list[Probe], list[int]]:
    log: list[int] = []
    return [Probe(i, o, n, log) for i, (o, n) in enumerate(spans)], log


@settings(max_examples=300, deadline=None)
@given(case(monotone(), ordered=False))
def test_linear_examined_counts_the_items_really_read(c: tuple[Spans, tuple[int, int]]) -> None:
    spans, (start, end) = c
    f, log = probes(spans)
    _, _, examined = linear_window_counted(f, start, end)
    assert examined == len(set(log))
    assert set(log) == set(range(examined))  # a prefix: the scan never skips an item


@settings(max_examples=300, deadline=None)
@given(ANY_SPANS, ANY_POINT, ANY_POINT)
def test_bisect_probes_counts_the_key_reads_on_any_input(spans: Spans, start: int, end: int) -> None:
    f, log = probes(spans)
    _, _, counted = bisect_window_counted(f, start, end)
    assert counted == len(log)  # each key call reads mm_position once


def test_work_counts_scale_as_expected() -> None:
    n = 16384
    assert linear_examined(n, n, n) == n
    assert linear_examined(0, 0, 0) == 0
    assert bisect_probes(n, n, n) == 2 * 14  # 2 * log2(n) for a power of two
    assert bisect_probes(1, 0, 1) == 2
    assert bisect_probes(0, 0, 0) == 0
    assert {name: lk.window for name, lk in LOOKUPS.items()} == {
        "linear": linear_window,
        "bisect": bisect_window,
        "hybrid": hybrid_window,
    }


def test_real_vllm_feature_specs() -> None:
    spans = [(3, 4), (10, 4), (20, 4)]
    f = [
        MultiModalFeatureSpec(
            data=None, modality="image", identifier=f"h{i}", mm_position=PlaceholderRange(o, n)
        )
        for i, (o, n) in enumerate(spans)
    ]
    for start, end in [(0, 5), (5, 12), (14, 20), (13, 30), (24, 40)]:
        expected = get_mm_features_in_window(f, start, end)
        assert bisect_window(f, start, end) == linear_window(f, start, end) == expected
        assert hybrid_window(f, start, end) == expected
    assert check_window_preconditions(f) is None


# --- pinned edge cases: (spans, window, vLLM == bisect_window, linear_window, old loop) --------

EDGES = {
    "empty list": ([], (0, 10), (0, 0), (0, 0), []),
    "window ends at the item's offset": ([(10, 4)], (6, 10), (0, 0), (0, 0), []),
    "window starts at the item's end": ([(10, 4)], (14, 20), (1, 1), (1, 1), []),
    "window starts inside the last item": ([(0, 4), (10, 4)], (13, 20), (1, 2), (1, 2), [1]),
    "adjacent items both selected": ([(0, 4), (4, 4)], (3, 5), (0, 2), (0, 2), [0, 1]),
    # zero-length item inside the window: selected (the V1 runner then trips assert start<end)
    "zero-length item inside": ([(0, 4), (6, 0), (8, 4)], (5, 10), (1, 3), (1, 3), [1, 2]),
    "zero-length item at window start": ([(5, 0)], (5, 6), (1, 1), (1, 1), []),
    "zero-length item, degenerate window on it": ([(5, 0)], (5, 5), (1, 0), (1, 0), []),
    # degenerate window inside an item selects it although the window is empty
    "degenerate window inside an item": ([(0, 4), (4, 4)], (2, 2), (0, 1), (0, 1), [0]),
    "degenerate window on a boundary": ([(0, 4), (4, 4)], (4, 4), (1, 1), (1, 1), []),
    "inverted window": ([(0, 4), (4, 4), (8, 4)], (9, 3), (2, 1), (2, 1), []),
    "identical spans (audio in video)": ([(0, 8), (0, 8)], (2, 3), (0, 2), (0, 2), [0, 1]),
    "partial overlap, monotone ends": ([(0, 6), (4, 6)], (7, 9), (1, 2), (1, 2), [1]),
    # nested span, ends 10 then 4: bisect MISSES item 0, which overlaps the window; linear keeps
    # it and also returns item 1, which does not overlap (the caller would then assert)
    "partial overlap, non-monotone ends": ([(0, 10), (2, 2), (12, 4)], (5, 6), (2, 2), (0, 2), [0]),
    # unsorted offsets: the two disagree and both are wrong (only item 1 overlaps): bisect takes
    # both items, linear and the old loop stop at item 0 and take none
    "unsorted offsets": ([(10, 4), (0, 4)], (0, 4), (0, 2), (0, 0), []),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_edge_case_pinned(name: str) -> None:
    spans, (start, end), want_bisect, want_linear, want_old = EDGES[name]
    f = feats(spans)
    assert get_mm_features_in_window(f, start, end) == want_bisect
    assert bisect_window(f, start, end) == want_bisect
    assert linear_window(f, start, end) == want_linear
    assert old_loop(spans, start, end) == want_old


# --- the hybrid lookup ----------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(case(monotone(), ordered=False), st.integers(0, 45))
def test_hybrid_equals_vllm_whenever_offsets_and_ends_are_monotone(
    c: tuple[Spans, tuple[int, int]], threshold: int
) -> None:
    """At every threshold (so both branches run on lists of every size), as vLLM's helper."""
    spans, (start, end) = c
    f = feats(spans)
    expected = get_mm_features_in_window(f, start, end)
    assert make_hybrid(threshold)(f, start, end) == expected
    assert make_hybrid(threshold, get_mm_features_in_window)(f, start, end) == expected


@settings(max_examples=300, deadline=None)
@given(ANY_SPANS, ANY_POINT, ANY_POINT, st.integers(0, 45))
def test_hybrid_is_linear_below_the_threshold_and_bisect_from_it(
    spans: Spans, start: int, end: int, threshold: int
) -> None:
    """On any input (unsorted, overlapping): exactly one of the two, chosen by the item count."""
    f = feats(spans)
    chosen = linear_window if len(f) < threshold else bisect_window
    assert make_hybrid(threshold)(f, start, end) == chosen(f, start, end)


@settings(max_examples=200, deadline=None)
@given(case(monotone(), ordered=False), st.integers(0, 45))
def test_hybrid_examined_counts_the_work_of_the_branch_taken(
    c: tuple[Spans, tuple[int, int]], threshold: int
) -> None:
    spans, (start, end) = c
    f, log = probes(spans)
    lo, hi = make_hybrid(threshold)(f, start, end)
    work = hybrid_examined(len(f), lo, hi, threshold)
    if len(f) < threshold:
        assert work == len(set(log))
    else:
        assert work == len(log)


def test_hybrid_threshold_is_the_measured_constant_unless_overridden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from abserve.vllm_plugin import lookup

    monkeypatch.delenv(lookup.HYBRID_THRESHOLD_ENV, raising=False)
    assert hybrid_threshold() == lookup.HYBRID_THRESHOLD
    f, log = probes([(10 * i, 4) for i in range(lookup.HYBRID_THRESHOLD - 1)])
    hybrid_window(f, 10**6, 10**6 + 1)  # a decode step past every item: the scan reads them all
    assert len(set(log)) == len(f)
    monkeypatch.setenv(lookup.HYBRID_THRESHOLD_ENV, "2")
    assert hybrid_threshold() == 2
    log.clear()
    hybrid_window(f, 10**6, 10**6 + 1)  # now bisect: two searches of ~log2(n) probes
    assert len(log) == bisect_probes(len(f), len(f), len(f))
    for bad in ("many", "-1"):
        monkeypatch.setenv(lookup.HYBRID_THRESHOLD_ENV, bad)
        with pytest.raises(ValueError, match=lookup.HYBRID_THRESHOLD_ENV):
            hybrid_threshold()


# --- precondition checker -------------------------------------------------------------------

VIOLATIONS = {
    "negative length": ([(0, 4), (5, -1)], 1, "negative_length"),
    "zero length": ([(0, 4), (6, 0), (8, 4)], 1, "zero_length"),
    "unsorted offsets": ([(0, 4), (10, 4), (5, 2)], 2, "unsorted_offsets"),
    "non-monotone ends": ([(0, 4), (10, 10), (12, 2)], 2, "non_monotone_ends"),
    "overlapping spans": ([(0, 4), (10, 4), (12, 4)], 2, "overlapping_spans"),
    "identical spans": ([(0, 8), (0, 8)], 1, "overlapping_spans"),
    "first of several wins": ([(0, 4), (2, 4), (1, 1), (9, 0)], 1, "overlapping_spans"),
    "zero length at index 0": ([(3, 0)], 0, "zero_length"),
}


@pytest.mark.parametrize("name", list(VIOLATIONS))
def test_precondition_violation_named(name: str) -> None:
    spans, index, kind = VIOLATIONS[name]
    v = check_window_preconditions(feats(spans))
    assert isinstance(v, WindowViolation)
    assert (v.index, v.kind) == (index, kind)
    assert str(v).startswith(f"item {index}: {kind.replace('_', ' ')} (")


def test_preconditions_hold_for_empty_and_adjacent() -> None:
    assert check_window_preconditions([]) is None
    assert check_window_preconditions(feats([(0, 4), (4, 4), (20, 1)])) is None


@settings(max_examples=200, deadline=None)
@given(monotone())
def test_checker_accepts_exactly_the_sorted_disjoint_inputs(spans: Spans) -> None:
    disjoint = all(n > 0 for _, n in spans) and all(o >= po + pn for (po, pn), (o, _) in pairwise(spans))
    assert (check_window_preconditions(feats(spans)) is None) == disjoint
