"""The net share of requests slowed beyond their own allowance (issue 58, ``compare.slowed_share``).

Noise is not slowdown: identical builds slow as many requests one way as the other, so a guard
whose allowance lies inside the noise does not fail them; a stall on a share of requests well
above the allowed share fails; the interval covers the true net share at every look at once.
"""

from __future__ import annotations

import numpy as np
import pytest

from abserve.compare.slowed_share import (
    pairs_to_decide,
    share_decision,
    share_sequence,
    slowed_signs,
)
from abserve.compare.tail_gate import share_spread_decision

LOOKS = list(range(6, 241, 6))


def test_signs_count_each_direction_beyond_the_requests_own_allowance() -> None:
    base = np.array([1.0, 1.0, 1.0, 1.2])
    cand = np.array([1.3, 1.05, 0.8, 1.0])
    assert slowed_signs(base, cand, 0.10, 0.0).tolist() == [1, 0, -1, -1]
    assert slowed_signs(base, cand, 0.10, 0.0, margin=0.15).tolist() == [1, 0, 0, 0]


def test_identical_builds_inside_the_noise_do_not_fail() -> None:
    """Short requests: the 10% allowance is inside the paired noise, a third of the requests
    look 'slowed beyond 10%' in each direction; a quantile of the excess would call that a tail."""
    fails = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        base = 0.055 + 0.005 * rng.standard_normal(240)
        cand = 0.055 + 0.005 * rng.standard_normal(240)
        signs = slowed_signs(base, cand, 0.10, 0.0)
        fails += share_decision(signs, LOOKS, 0.05, 0.05) == "fail"
    assert fails <= 10  # alpha = 0.05 at every look at once; in fact none


def test_a_stall_well_above_the_allowed_share_fails_and_none_passes() -> None:
    rng = np.random.default_rng(1)
    signs = (rng.random(240) < 0.12).astype(np.int8)  # 12% slowed, none mirrored
    assert share_decision(signs, LOOKS, 0.01, 0.05) == "fail"
    assert share_spread_decision(signs, LOOKS, 0.01, 0.05) == "fail"
    assert share_decision(np.zeros(600, dtype=np.int8), list(range(6, 601, 6)), 0.05, 0.05) == "pass"


def test_a_block_of_slowed_requests_in_one_half_is_unstable_not_a_fail() -> None:
    signs = np.zeros(120, dtype=np.int8)
    signs[100:115] = 1
    assert share_decision(signs, LOOKS[:20], 0.01, 0.05) == "fail"
    assert share_spread_decision(signs, LOOKS[:20], 0.01, 0.05) == "unstable"


@pytest.mark.slow
def test_interval_covers_the_true_net_share_at_every_look_at_once() -> None:
    missed = 0
    for seed in range(100):
        rng = np.random.default_rng(100 + seed)
        u = rng.random(240)
        signs = np.where(u < 0.08, 1, np.where(u < 0.11, -1, 0)).astype(np.int8)  # delta = 0.05
        for n in (30, 90, 240):
            got = share_sequence(signs[:n], [k for k in LOOKS if k <= n], 0.05)
            if not got.low <= 0.05 <= got.high:
                missed += 1
                break
    assert missed <= 10  # each side at alpha: at most 2 alpha of runs miss at some look


def test_pairs_to_decide_grows_as_the_share_nears_its_allowance() -> None:
    far = pairs_to_decide(60, 6, 0, 0.01, 0.05)
    near = pairs_to_decide(60, 2, 0, 0.01, 0.05)
    assert far is not None
    assert near is not None
    assert 60 <= far < near
    slow = pairs_to_decide(100, 1, 0, 0.01, 0.05)
    assert slow is None or slow > 1000
