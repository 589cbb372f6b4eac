"""Latency of conversations by turn and by shared prefix: where the prefix cache shows.

Replayed sessions tag every request with its ``turn`` (1-based) and whether its prompt starts
with a prefix another request sent before (``shared-prefix``: ``yes``/``no``). A first turn has
nothing to reuse; a later turn resends the history, so its TTFT is what the prefix cache
decides. Per group (first turn, later turns; shared, not shared) and per metric (TTFT,
end-to-end) each arm's median and the paired A/B shift (Hodges-Lehmann, candidate - baseline,
with its interval at the policy's confidence) are reported. Requests without the tags belong
to no group; a run none of whose requests carry them has no rows, and its report no section.

Pure: reads the judged exchanges' tags and their per-request latencies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import numpy as np

from abserve.compare.gate_line import finite
from abserve.compare.latency import RequestLatency, paired_sample
from abserve.compare.model import TurnRow
from abserve.compare.policy import Policy
from abserve.compare.stats.paired import hodges_lehmann
from abserve.model.records import Exchange

Latencies = Mapping[str, Mapping[str, RequestLatency | None]]
METRICS = ("ttft", "e2e")
FIRST, LATER = "first turn", "later turns"
SHARED = {"no": "no shared prefix", "yes": "shared prefix"}


def turn_group(tags: Mapping[str, str]) -> str | None:
    """``first turn`` (turn 1), ``later turns`` (2 and on), or None (untagged or not a turn)."""
    raw = tags.get("turn", "")
    if not raw.isdigit() or int(raw) < 1:
        return None
    return FIRST if int(raw) == 1 else LATER


def shared_group(tags: Mapping[str, str]) -> str | None:
    """``shared prefix`` (``shared-prefix: yes``), ``no shared prefix`` (``no``), or None."""
    return SHARED.get(tags.get("shared-prefix", "").strip().lower())


Dimension = Literal["turn", "shared-prefix"]
GROUPINGS: dict[Dimension, Callable[[Mapping[str, str]], str | None]] = {
    "turn": turn_group, "shared-prefix": shared_group}
ORDER = (FIRST, LATER, *SHARED.values())


def _row(dimension: Dimension, group: str, metric: str, base: np.ndarray, cand: np.ndarray,
         confidence: float) -> TurnRow:
    iv = hodges_lehmann(cand - base, confidence)
    return TurnRow(dimension=dimension, group=group,
                   metric=metric, n=iv.n, baseline=float(np.median(base)),
                   candidate=float(np.median(cand)), estimate=iv.estimate, low=finite(iv.low),
                   high=finite(iv.high))


def turn_rows(judged: list[Exchange], lat: Latencies, policy: Policy) -> list[TurnRow]:
    """Every group's rows (TTFT, then end-to-end), first turn before later turns, no shared
    prefix before shared; [] when no
    judged request carries a ``turn`` or ``shared-prefix`` tag."""
    if not any(ex.tags.get("turn") or ex.tags.get("shared-prefix") for ex in judged):
        return []
    samples = [paired_sample(judged, lat, metric, policy.arms.baseline, policy.arms.candidate)
               for metric in METRICS]
    rows: list[TurnRow] = []
    for dimension, group_of in GROUPINGS.items():
        groups = [[group_of(ex.tags) for ex in sample.paired()] for sample in samples]
        for group in (g for g in ORDER if any(g in per_metric for per_metric in groups)):
            for metric, sample, keys in zip(METRICS, samples, groups, strict=True):
                at = np.fromiter((k == group for k in keys), dtype=bool, count=len(keys))
                if at.any():
                    rows.append(_row(dimension, group, metric, sample.baseline[at], sample.candidate[at],
                                     policy.confidence))
    return rows
