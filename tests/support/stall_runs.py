"""Synthetic paired runs shaped like the CPU default's (24 output tokens, two arms on one core,
small paired noise) whose candidate stalls a share of requests: after its first token (the
``decode-stall`` mutant's shape) or before it. For the tail gates' tests (issue 47).
"""

from __future__ import annotations

import numpy as np
from tests.support.records_factory import arm, exchange, provenance, run_info

from abserve.compare import Policy, judge
from abserve.compare.model import Judgment
from abserve.compare.policy import ArmRoles
from abserve.model.records import Exchange

TOKENS = list(range(1, 25))  # the CPU default's max_tokens


def run(n: int, *, decode_stall: float = 0.0, prefill_stall: float = 0.0, stalled_from: int = 0,
        every: int = 8, seed: int = 0) -> list[Exchange]:
    """``n`` paired requests sharing a core (small paired noise); b stalls every ``every``-th
    request from ``stalled_from`` on: ``decode_stall`` seconds before its 5th token and/or
    ``prefill_stall`` seconds before its first."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        items = (8, 256)[i % 2]
        gap, ttft = 0.014 * float(rng.lognormal(0, 0.1)), 0.4 + 0.001 * items
        gaps_a = gap * (1 + 0.01 * rng.normal(size=len(TOKENS) - 1))
        gaps_b = gap * (1 + 0.01 * rng.normal(size=len(TOKENS) - 1))
        ttft_a, ttft_b = ttft * (1 + 0.01 * rng.normal()), ttft * (1 + 0.01 * rng.normal())
        if i >= stalled_from and i % every == 3:
            gaps_b[3] += decode_stall
            ttft_b += prefill_stall
        arms = [arm("a", TOKENS, ttft=ttft_a, itl=list(gaps_a)),
                arm("b", TOKENS, ttft=ttft_b, itl=list(gaps_b))]
        out.append(exchange(i, arms, items=items, profile="many-items" if items >= 128 else "mixed",
                            extra_tags={"block": str(i // 6), "placement": "a:0,b:0"}))
    return out


def judged(exchanges: list[Exchange], policy: Policy) -> Judgment:
    arms = {"a": provenance("linear"), "b": provenance("linear")}
    roles = ArmRoles(baseline="a", candidate="b", floor=None)
    return judge(run_info(arms), exchanges, policy.model_copy(update={"arms": roles}))
