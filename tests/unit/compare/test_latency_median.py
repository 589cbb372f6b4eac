"""The per-request median gap (``itl``) is numpy's median bit for bit, NaN included: the
digest's faster median must not move a single latency value of a judgment."""

from __future__ import annotations

import math
import struct

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from abserve.compare.latency import _median

gaps = st.floats(min_value=-1e6, max_value=1e6) | st.sampled_from([0.0, -0.0, 1e-300, math.inf, math.nan])


@settings(max_examples=300, deadline=None)
@given(st.lists(gaps, min_size=1, max_size=80))
@example([0.0, -5e-324])  # the halving of a negative sum underflows to -0.0 in numpy too
@example([-0.0, -0.0])  # numpy's sum starts at +0.0
@example([-0.0])
def test_the_median_is_numpys_bit_for_bit(values: list[float]) -> None:
    array = np.asarray(values, dtype=np.float64)
    assert struct.pack("<d", _median(array)) == struct.pack("<d", float(np.median(array)))
