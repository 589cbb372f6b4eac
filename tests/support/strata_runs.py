"""Synthetic runs for the strata and tail gates: a regression in one stratum or in the tail.

Each exchange has a shared per-request base latency (mixed traffic: TTFT and time per token grow
with images per request), small paired noise, and on the candidate an optional relative slowdown
of the image-dense stratum and an optional stall on a share of requests (TTFT only).
"""

from __future__ import annotations

import numpy as np
from tests.support.records_factory import arm, exchange, run_info

from abserve.compare import Policy, judge
from abserve.compare.model import Judgment
from abserve.model.records import Exchange

TOKENS = list(range(1, 13))
ITEMS = (2, 8, 32, 128, 256, 512, 4, 16)  # 3 of 8 requests (37.5%) have >= 128 images


def policy(**kw: object) -> Policy:
    base: dict[str, object] = {
        "arms": {"baseline": "a", "candidate": "b", "floor": None},
        "min_samples": 20,
        "warmup_requests": 0,
        "mode": "sequential",
        "sequential": {"look_every": 8, "warmup": "fixed", "tails": "anytime"},
        "equality": {"resolution": 0.10},
        "metrics": [{"metric": "tpot", "allowed_relative": 0.05, "critical": True},
                    {"metric": "ttft", "allowed_relative": 0.05, "critical": True},
                    {"metric": "ttft", "statistic": "p95", "allowed_relative": 0.10, "critical": True}],
        "strata": [{"name": "dense", "tag": "items", "min": 128, "metrics": ["tpot", "ttft"],
                    "allowed_relative": 0.05, "critical": True}],
    }
    base.update(kw)
    return Policy.model_validate(base)


def run(n: int, *, dense: float = 0.0, stall_share: float = 0.0, stall: float = 0.5, seed: int = 0,
        heavy: bool = False, items: tuple[int, ...] = ITEMS, placed: bool = True) -> list[Exchange]:
    """``n`` exchanges; b is ``dense`` (relative) slower on >= 128 images, stalls on a share;
    ``placed=False``: no placement tags (a by-hand run, placement not controlled)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = items[i % len(items)]
        gap = 0.010 + 0.000002 * k
        ttft = 0.3 + 0.0002 * k
        if heavy:  # heavy-tailed requests (both arms alike): lognormal spread of the base
            scale = float(rng.lognormal(0.0, 0.6))
            gap, ttft = gap * scale, ttft * scale
        noise = rng.standard_t(3, size=4) if heavy else rng.normal(size=4)
        gap_a, gap_b = gap * (1 + 0.01 * noise[0]), gap * (1 + 0.01 * noise[1])
        ttft_a, ttft_b = ttft * (1 + 0.01 * noise[2]), ttft * (1 + 0.01 * noise[3])
        if k >= 128:
            gap_b, ttft_b = gap_b * (1 + dense), ttft_b * (1 + dense)
        if stall_share and rng.random() < stall_share:
            ttft_b += stall
        tags = {"block": str(i // 8), "placement": "a:0,b:0"} if placed else {}
        arms = [arm("a", TOKENS, ttft=ttft_a, itl=gap_a), arm("b", TOKENS, ttft=ttft_b, itl=gap_b)]
        out.append(exchange(i, arms,
                            items=k, profile="many-items" if k >= 128 else "mixed", extra_tags=tags))
    return out


def judged(exchanges: list[Exchange], p: Policy | None = None) -> Judgment:
    return judge(run_info({"a": run_info().arms["a"], "b": run_info().arms["b"]}), exchanges, p or policy())
