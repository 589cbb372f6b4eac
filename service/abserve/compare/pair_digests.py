"""One arm pair's ``PairDigest`` per exchange, the common shape kept as a byte and an int.

Nearly every exchange of a healthy run compares ``identical`` with no logprob gap: its
``PairDigest`` then says nothing beyond the exchange's own tags (profile, items), whether the
prompt was sampled, and three mismatch flags. ``PairDigests`` keeps such a digest as one flag
byte and the sampled prompt length in typed arrays (row = the exchange's ``SlimExchange.row``)
and builds the ``PairDigest`` back on access; any other digest is kept whole. Read through
the ``Mapping`` interface, the digests are the ones fed, exactly. Pure: no I/O.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping

from abserve.compare.equality import PairDigest
from abserve.compare.latency import items_of
from abserve.compare.slim import SlimExchange, grown

_STATUS, _FINISH, _USAGE, _SAMPLED = 1, 2, 4, 8
_KEPT_WHOLE = -1


def _plus_zero(value: float | None) -> bool:
    return type(value) is float and value == 0.0 and math.copysign(1.0, value) > 0


def _code(d: PairDigest, ex: SlimExchange) -> int:
    """The flag byte of ``d`` when it has the common shape, else ``_KEPT_WHOLE``."""
    sampled = d.prompt_positions is not None
    common = (d.cls == "identical" and d.position is None and _plus_zero(d.max_logprob_delta)
              and d.drift_position is None and d.prompt_drift_position is None
              and d.left_problem is None and d.right_problem is None
              and (_plus_zero(d.prompt_logprob_delta) if sampled else d.prompt_logprob_delta is None)
              and d.profile == ex.tags.get("profile", "untagged") and d.items == items_of(ex))
    if not common:
        return _KEPT_WHOLE
    return (d.status_mismatch * _STATUS | d.finish_mismatch * _FINISH | d.usage_mismatch * _USAGE
            | sampled * _SAMPLED)


class PairDigests(Mapping[str, PairDigest]):
    """Request id -> ``PairDigest`` of one arm pair, over a digest's exchanges (each one
    digested for every pair, so the digest's exchanges are this mapping's keys)."""

    def __init__(self, exchanges: Mapping[str, SlimExchange]) -> None:
        self.exchanges = exchanges
        self.codes = array("b")
        self.prompt_positions = array("i")  # widened as it must (``slim.grown``)
        self.whole: dict[str, PairDigest] = {}

    def add(self, ex: SlimExchange, digest: PairDigest) -> None:
        """Keep ``digest`` of ``ex`` (the exchange digested last: rows are fed in order)."""
        if ex.row != len(self.codes):
            raise ValueError(f"row {ex.row} fed out of order (expected {len(self.codes)})")
        code = _code(digest, ex)
        self.codes.append(code)
        self.prompt_positions = grown(self.prompt_positions, digest.prompt_positions or 0)
        if code == _KEPT_WHOLE:
            self.whole[ex.request_id] = digest

    def __getitem__(self, request_id: str) -> PairDigest:
        ex = self.exchanges[request_id]
        code = self.codes[ex.row]
        if code == _KEPT_WHOLE:
            return self.whole[request_id]
        sampled = self.prompt_positions[ex.row] if code & _SAMPLED else None
        return PairDigest(request_id, "identical", None, 0.0, None, sampled,
                          None if sampled is None else 0.0, None, bool(code & _STATUS),
                          bool(code & _FINISH), bool(code & _USAGE), None, None,
                          ex.tags.get("profile", "untagged"), items_of(ex))

    def __iter__(self) -> Iterator[str]:
        return iter(self.exchanges)

    def __len__(self) -> int:
        return len(self.exchanges)
