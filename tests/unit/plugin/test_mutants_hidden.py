"""The issue-32 mutants: ``dense-slow`` slows only image-dense calls, ``stall`` only a share of requests."""

from __future__ import annotations

import time
from types import SimpleNamespace as NS

import pytest

from abserve.vllm_plugin import mutants
from abserve.vllm_plugin.lookup import linear_window


def feats(count: int, ident: str = "img") -> list[NS]:
    return [NS(mm_position=NS(offset=10 * i, length=4), identifier=f"{ident}-{i}") for i in range(count)]


def timed(lookup: mutants.Lookup, items: list[NS]) -> tuple[tuple[int, int], float]:
    began = time.perf_counter()
    result = lookup(items, 0, 40)
    return result, time.perf_counter() - began


def test_dense_slow_pays_only_on_requests_with_enough_items() -> None:
    lookup = mutants.only_dense(linear_window, mutants.with_delay(linear_window, 20_000), 128)
    (res_small, small) = timed(lookup, feats(8))
    (res_dense, dense) = timed(lookup, feats(128))
    assert res_small == linear_window(feats(8), 0, 40)
    assert res_dense == linear_window(feats(128), 0, 40)
    assert small < 0.01 <= 0.02 <= dense


def test_stall_hits_a_stable_share_of_requests_once_each() -> None:
    keys = [f"req{i}-0/8" for i in range(4000)]
    share = sum(mutants.stalled(k, 0.25) for k in keys) / len(keys)
    assert share == pytest.approx(0.25, abs=0.03)
    assert [mutants.stalled(k, 0.25) for k in keys[:50]] == [mutants.stalled(k, 0.25) for k in keys[:50]]
    ident = next(f"r{i}" for i in range(1000) if mutants.stalled(f"{f'r{i}'}-0/4", 0.5))
    lookup = mutants.with_stalls(linear_window, 20_000, 0.5)
    items = feats(4, ident)
    assert mutants.request_key(items) == f"{ident}-0/4"
    _, first = timed(lookup, items)
    _, again = timed(lookup, items)
    assert first >= 0.02 > 0.01 > again


def test_new_mutants_are_selectable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("dense-slow", "stall"):
        monkeypatch.setenv(mutants.MUTANT_ENV, name)
        assert mutants.selected_mutant() == name
        assert mutants.mutate_lookup(name, linear_window) is not linear_window


def test_decode_stall_delays_one_decode_step_of_a_stable_share_of_requests() -> None:
    """Prefill windows and the other decode steps run at full speed; the stalled request's
    ``step``-th single-token window pays, once per request; a new request (start 0) counts anew."""
    ident = next(f"r{i}" for i in range(1000) if mutants.stalled(f"r{i}-0/4", 0.5))
    calm = next(f"r{i}" for i in range(1000) if not mutants.stalled(f"r{i}-0/4", 0.5))
    lookup = mutants.with_decode_stalls(linear_window, 20_000, 0.5, step=3)
    items = feats(4, ident)

    def window(start: int, end: int, which: list[NS] = items) -> float:
        began = time.perf_counter()
        assert lookup(which, start, end) == linear_window(which, start, end)
        return time.perf_counter() - began

    def request(which: list[NS]) -> list[float]:
        prefill = [window(0, 32, which), window(32, 64, which)]
        return prefill + [window(64 + k, 65 + k, which) for k in range(5)]

    stalled = request(items)
    assert [t >= 0.02 for t in stalled] == [False, False, False, False, True, False, False]
    assert [t >= 0.02 for t in request(items)] == [False, False, False, False, True, False, False]
    assert max(request(feats(4, calm))) < 0.01
    assert max(window(70, 71, feats(4, "never-started")) for _ in range(4)) < 0.01


def test_decode_stall_is_selected_with_its_share_and_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mutants.MUTANT_ENV, "decode-stall")
    assert mutants.selected_mutant() == "decode-stall"
    assert mutants.stall_share("0.125") == 0.125
    assert mutants.stall_step() == 4
    monkeypatch.setenv(mutants.STALL_STEP_ENV, "2")
    assert mutants.stall_step() == 2
    assert "decode-stall" in mutants.LATENCY_MUTANTS
