"""The ``batch-tax`` mutant (issue 59): free at one request in flight, a cost per request beside it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from abserve.vllm_plugin import mutants


def test_the_tax_is_zero_at_one_request_and_grows_with_the_batch() -> None:
    assert mutants.batch_tax_us(0, 1000) == 0
    assert mutants.batch_tax_us(1, 1000) == 0
    assert mutants.batch_tax_us(4, 1000) == 3000


def test_the_gather_step_is_taxed_only_beside_a_second_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mutants.DELAY_ENV, "1")

    class Runner:
        def _gather_mm_embeddings(self, *args: Any) -> str:
            return "gathered"

    taxed: list[int] = []
    mutants.install_batch_tax(Runner, lambda: taxed.append(1))
    one, three = Runner(), Runner()
    one.input_batch = SimpleNamespace(req_ids=["r1"])  # type: ignore[attr-defined]
    three.input_batch = SimpleNamespace(req_ids=["r1", "r2", "r3"])  # type: ignore[attr-defined]
    assert one._gather_mm_embeddings() == "gathered"
    assert taxed == []
    assert three._gather_mm_embeddings() == "gathered"
    assert taxed == [1]
    assert "batch-tax" in mutants.MUTANTS
    assert "batch-tax" in mutants.V1_RUNNER_ONLY
