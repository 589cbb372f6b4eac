"""The test-only mutants do exactly the wrong thing they promise, and only that."""

from __future__ import annotations

import time
from types import SimpleNamespace as NS

import pytest

from abserve.vllm_plugin import mutants
from abserve.vllm_plugin.lookup import linear_window


def feats(*spans: tuple[int, int]) -> list[NS]:
    return [NS(mm_position=NS(offset=o, length=n)) for o, n in spans]


def test_drop_straddle_drops_only_the_item_straddling_the_window_end() -> None:
    items = feats((0, 4), (6, 4), (12, 4))
    assert linear_window(items, 0, 8) == (0, 2)
    assert mutants.drop_straddle_window(items, 0, 8) == (0, 1)  # (6,4) straddles 8
    assert mutants.drop_straddle_window(items, 0, 10) == linear_window(items, 0, 10)  # ends at 10


def test_slow_mutant_adds_its_configured_cost_and_keeps_the_answer() -> None:
    items = feats((0, 4), (6, 4))
    slow = mutants.with_delay(linear_window, 3000)
    began = time.perf_counter()
    assert slow(items, 0, 8) == linear_window(items, 0, 8)
    assert time.perf_counter() - began >= 0.003


def test_embed_fault_zeroes_the_middle_item_of_large_requests_only() -> None:
    class Runner:
        features: list[NS]

        def _gather_mm_embeddings(self, _out: object) -> list[object]:
            return [self._get_encoder_output_from_cache(f.identifier) for f in self.features]

        def _get_encoder_output_from_cache(self, mm_hash: str) -> int:
            return 7

    faults: list[int] = []
    mutants.install_embed_fault(Runner, lambda: faults.append(1))
    big = [NS(identifier=f"i{k}") for k in range(mutants.min_items() + 1)]
    runner = Runner()
    runner.input_batch = NS(req_ids=["r"])  # type: ignore[attr-defined]
    runner.requests = {"r": NS(mm_features=big)}  # type: ignore[attr-defined]
    runner.features = big
    out = runner._gather_mm_embeddings(None)
    assert out.count(0) == 1
    assert out[len(big) // 2] == 0
    assert faults == [1]
    runner.requests = {"r": NS(mm_features=big[:3])}  # type: ignore[attr-defined]
    runner.features = big[:3]
    assert runner._gather_mm_embeddings(None) == [7, 7, 7]


def test_unknown_mutant_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mutants.MUTANT_ENV, "off-by-two")
    with pytest.raises(ValueError, match="expected one of"):
        mutants.selected_mutant()
