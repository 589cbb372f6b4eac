"""The judgment's own working set grows by a bounded few hundred bytes an exchange (issue 30).

Judging reads a digest (``abserve.compare.digest``) that keeps ~420 B an identical exchange;
on top of it the judgment builds, per gate, the paired sample (float64 arrays read from the
digest's columns: ``slim.RunLatencies.paired_values``), the gate's design and the looks of
each path, kept as columns (``compare.trajectory.Looks``: 33 bytes a look, not a ~170-byte
``Look`` object). This test judges two runs of the benchmark's
shape (``gpu`` policy: sequential, a look every 16 exchanges) and bounds the growth of the
peak traced memory of ``judge_digest`` per exchange. Theil-Sen's trend (at most
``TREND_POINTS`` points: a constant ~41 MiB traced, ``test_theil_sen_memory``) is stubbed out so the peak
is the judgment's own.
"""

from __future__ import annotations

import gc
import importlib
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from tests.support.records_factory import arm, exchange, run_info

from abserve.compare import load_policy
from abserve.compare.digest import Digester
from abserve.compare.judge import judge_digest
from abserve.model.records import ArmOutcome

REPO = Path(__file__).resolve().parents[3]
BOUND = 110  # bytes an exchange; measured 73 (looks as columns); f35f2d0 161, before the columnar samples 610


def _variants(seed: int = 0, count: int = 40) -> list[list[ArmOutcome]]:
    """Arm triples with noisy times (so every gate has a spread to judge), built once."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        out.append([arm(a, range(10, 42), ttft=0.05 + float(rng.normal(0, 0.002)),
                        itl=[0.01 + float(g) for g in rng.normal(0, 0.0004, 31)]) for a in ("a", "b", "a2")])
    return out


def _peak_per_run(n: int, variants: list[list[ArmOutcome]]) -> int:
    """Peak traced bytes of judging a digest of ``n`` exchanges, above the digest itself."""
    policy = load_policy(REPO / "configs" / "policy" / "gpu.yaml")
    digest = Digester(policy)
    digest.feed(exchange(i, variants[i % len(variants)], profile="chat", items=1 + i % 8)
                for i in range(n))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        judge_digest(run_info(), digest, policy)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_the_judgments_working_set_grows_a_few_hundred_bytes_an_exchange(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judge = importlib.import_module("abserve.compare.judge")
    monkeypatch.setattr(judge, "theil_sen_trend", lambda *args, **kwargs: None)
    variants = _variants()
    small, large = 1_000, 6_000
    grown = _peak_per_run(large, variants) - _peak_per_run(small, variants)
    per_exchange = grown / (large - small)
    assert per_exchange < BOUND, f"{per_exchange:.0f} bytes of judgment per exchange"
