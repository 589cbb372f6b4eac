"""A gate's looks kept as columns (``abserve.compare.trajectory.Looks``) read back as the list
of ``Look`` they replace: every value (None, -0.0, NaN, infinities), indexing, slicing,
equality, and the same dump and validation as a ``list[Look]`` field."""

from __future__ import annotations

import math
import struct

import pytest
from pydantic import TypeAdapter

from abserve.compare.model import Drift, Look, MetricLine
from abserve.compare.trajectory import Looks

LOOKS = [Look(n=16, estimate=None, low=None, high=None),
         Look(n=32, estimate=-0.0, low=-math.inf, high=None),
         Look(n=48, estimate=math.nan, low=None, high=math.inf),
         Look(n=2**40, estimate=1e-3, low=-2.5, high=7.0)]


def _bits(look: Look) -> tuple[object, ...]:
    return tuple(struct.pack("<d", v) if isinstance(v, float) else v
                 for v in (look.n, look.estimate, look.low, look.high))


def test_looks_read_back_bit_for_bit_and_index_as_a_list() -> None:
    looks = Looks(LOOKS)
    assert len(looks) == 4
    assert [_bits(lk) for lk in looks] == [_bits(lk) for lk in LOOKS]
    assert _bits(looks[-1]) == _bits(LOOKS[-1])
    assert _bits(looks[-4]) == _bits(LOOKS[0])
    assert [lk.n for lk in looks[1:3]] == [32, 48]
    assert isinstance(looks[::2], Looks)
    with pytest.raises(IndexError):
        looks[4]
    with pytest.raises(IndexError):
        looks[-5]
    assert not Looks()
    finite = [LOOKS[0], LOOKS[3]]
    assert Looks(finite) == finite  # equal to the list (NaN, as in a list, is unequal to itself)
    assert Looks(finite) == Looks(finite)
    assert Looks(finite) != LOOKS[:1]


def test_a_trajectory_dumps_and_validates_as_the_list_of_looks() -> None:
    as_list = TypeAdapter(list[Look])
    finite = [LOOKS[0], Look(n=32, estimate=0.5, low=-1.0, high=2.0)]
    line = MetricLine(name="tpot.hl", metric="tpot", statistic="mean", direction="increase", critical=True,
                      n=3, confidence=0.95, outcome="pass", reason="", trajectory=Looks(finite),
                      drift=Drift(estimate=0.0, trajectory=Looks(finite)))
    for mode in ("python", "json"):
        dumped = line.model_dump(mode=mode)
        assert dumped["trajectory"] == as_list.dump_python(finite, mode=mode)
        assert dumped["drift"]["trajectory"] == dumped["trajectory"]
    again = MetricLine.model_validate_json(line.model_dump_json())
    assert isinstance(again.trajectory, Looks)
    assert again.trajectory == finite
    assert again.model_dump() == line.model_dump()
    line.trajectory = finite  # a plain list set on a line dumps the same
    assert line.model_dump(mode="json")["trajectory"] == as_list.dump_python(finite, mode="json")
    assert isinstance(MetricLine.model_validate(line.model_dump()).trajectory, Looks)
