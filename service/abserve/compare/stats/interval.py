"""An estimate and its interval: the one shape of every interval the judgment computes.

Fixed-sample intervals (``stats``, ``two_sample``, ``unpaired``) record the observations
behind them and their confidence; anytime-valid ones (``anytime``, ``sequential``) hold the
same three numbers, their level being the judgment's, and are ``-inf``/``inf`` while not yet
bounded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """An estimate with a two-sided interval (``n``/``confidence`` 0 where not recorded)."""

    estimate: float
    low: float
    high: float
    n: int = 0
    confidence: float = 0.0

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)
