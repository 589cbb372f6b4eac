"""Synthetic conversations for the prefix-cache tests: sessions of turns, tagged as replayed.

Every session's first turn prefills its whole prompt on both arms; a later turn resends the
history, which the baseline finds in its prefix cache (a short TTFT) and a candidate that lost
prefix reuse (the ``salt-prefix`` mutant) prefills again: ``later_ttft`` is its TTFT there. The
blocks carry each arm's prefix-cache counters as ``abserve run`` records them.
"""

from __future__ import annotations

import numpy as np
from tests.support.records_factory import arm, exchange, provenance, run_info

from abserve.compare.policy import Policy
from abserve.model.provenance import BlockRecord, PrefixCacheCounts
from abserve.model.records import Exchange, RunInfo

FIRST_TTFT, CACHED_TTFT = 0.200, 0.040


def conversations(sessions: int, turns: int = 3, *, later_ttft: float = CACHED_TTFT,
                  seed: int = 0) -> list[Exchange]:
    """``sessions`` x ``turns`` exchanges on arms a and b, in session order."""
    rng = np.random.default_rng(seed)
    out: list[Exchange] = []
    for s in range(sessions):
        for t in range(1, turns + 1):
            base = FIRST_TTFT if t == 1 else CACHED_TTFT
            cand = FIRST_TTFT if t == 1 else later_ttft
            noise = [float(x) for x in rng.normal(0, 0.002, 2)]
            tags = {"session": f"s{s}", "turn": str(t), "shared-prefix": "no" if t == 1 else "yes"}
            out.append(exchange(len(out), [arm("a", ttft=base + noise[0]), arm("b", ttft=cand + noise[1])],
                                profile="conversations", extra_tags=tags))
    return out


def cached_run(a: tuple[int, int] | None, b: tuple[int, int] | None) -> RunInfo:
    """A run whose one block recorded arm a's and b's (queries, hits); None: not recorded."""
    run = run_info({"a": provenance("linear"), "b": provenance("linear+salt-prefix")})
    counts = {name: PrefixCacheCounts(queries=q, hits=h) for name, got in (("a", a), ("b", b))
              if got is not None for q, h in [got]}
    run.provenance.blocks = [BlockRecord(index=0, requests=1, prefix_cache=counts)] if counts else []
    return run


def conversation_policy(**kw: object) -> Policy:
    """The shipped prefix-cache policy's gates on a small sample: overall TTFT and the later turns."""
    base: dict[str, object] = {
        "arms": {"baseline": "a", "candidate": "b", "floor": None},
        "min_samples": 10, "warmup_requests": 0, "mode": "sequential",
        "sequential": {"look_every": 8, "warmup": "fixed"},
        "metrics": [{"metric": "ttft", "allowed_relative": 0.10, "critical": True}],
        "strata": [{"name": "later-turns", "tag": "turn", "min": 2, "metrics": ["ttft"],
                    "allowed_relative": 0.10, "critical": True, "label": "later turns"}],
    }
    base.update(kw)
    return Policy.model_validate(base)
