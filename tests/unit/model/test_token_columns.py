"""The packed token columns (``abserve.model.token_columns``): what is packed is what comes back,
bit for bit (``-inf``, NaN, ``-0.0``, ``None`` ids, lone surrogates, ints beyond int64), the
compare key is equal exactly when the compared token data is, and the packer writes the
very bytes the format was defined with (``tests/support/v2_packer.py``)."""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import from_json
from tests.support import v2_packer
from tests.support.records_factory import arm, full_outcome, position

from abserve.model.records import ArmOutcome, PositionLogprobs, TopLogprob
from abserve.model.token_columns import columns_of, unpack
from abserve.model.token_pack import pack_arms
from abserve.store.rows import dumps_json


def exact(value: Any) -> Any:
    """``value`` with every float as its 8 bytes: equal exactly when bit for bit equal."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [exact(v) for v in value]
    return value


def stored_and_read(arms: dict[str, ArmOutcome]) -> dict[str, ArmOutcome]:
    """Through the store's encoding: scalars as JSON text, token data as the blob."""
    packed, blob = pack_arms(arms)
    docs = from_json(dumps_json(arms, exclude=packed or None))
    return {name: columns.outcome() for name, columns in unpack(docs, blob).items()}


logprobs = st.floats() | st.sampled_from([-math.inf, math.nan, -0.0, -1e-300])
int64 = st.integers(-(2**63), 2**63 - 1)
ids = st.none() | st.integers(-(2**31), 2**31) | int64  # beyond int64: the sample below
texts = st.text(st.characters(exclude_categories=()), max_size=6)


@st.composite
def positions(draw: st.DrawFn) -> PositionLogprobs:
    top = draw(st.lists(st.builds(TopLogprob, token=texts, logprob=logprobs, token_id=ids), max_size=6))
    return PositionLogprobs(token=draw(texts), logprob=draw(logprobs), token_id=draw(ids), top=top)


@st.composite
def outcomes(draw: st.DrawFn, name: str) -> ArmOutcome:
    return ArmOutcome(
        arm=name,
        status=draw(st.none() | st.just(200)),
        t_first_token=draw(st.none() | st.floats(allow_nan=False) | st.just(math.nan)),  # scalars: JSON
        token_times=draw(st.lists(st.floats(), max_size=6)),
        text=draw(texts),
        token_ids=draw(st.lists(int64 | st.integers(0, 200_000), max_size=6)),
        logprobs=draw(st.lists(positions(), max_size=5)),
        prompt_logprobs=draw(st.none() | st.lists(positions(), max_size=3)),
    )


@settings(max_examples=150, deadline=None)
@given(a=outcomes("a"), b=outcomes("b"), same=st.booleans())
def test_any_outcomes_come_back_bit_for_bit(a: ArmOutcome, b: ArmOutcome, same: bool) -> None:
    arms = {"a": a, "b": a.model_copy(update={"arm": "b"}) if same else b}
    got, view = stored_and_read(arms), columns_of(arms)
    assert exact({k: o.model_dump() for k, o in got.items()}) == exact(
        {k: o.model_dump() for k, o in arms.items()})
    assert view["a"].packed
    if same:
        assert view["a"].compare_key == view["b"].compare_key


@settings(max_examples=150, deadline=None)
@given(a=outcomes("a"), b=outcomes("b"), c=outcomes("c"), same=st.booleans(), level=st.sampled_from([1, 3]))
def test_the_packer_writes_the_reference_bytes(a: ArmOutcome, b: ArmOutcome, c: ArmOutcome,
                                               same: bool, level: int) -> None:
    arms = {"a": a, "b": a.model_copy(update={"arm": "b"}) if same else b, "c": c}
    assert pack_arms(arms, level) == v2_packer.pack_arms(arms, level)


@settings(max_examples=80, deadline=None)
@given(names=st.lists(texts | st.sampled_from(['a"b', "a\\b", "\x7f", "é", "\n", "b-1.x"]),
                      min_size=1, max_size=3, unique=True), a=outcomes("a"))
def test_any_arm_names_pack_to_the_reference_bytes(names: list[str], a: ArmOutcome) -> None:
    arms = {name: a.model_copy(update={"arm": name}) for name in names}
    assert pack_arms(arms) == v2_packer.pack_arms(arms)


def test_the_store_sample_and_missing_fields_round_trip() -> None:
    sample = {"a": full_outcome("a", 3), "b": ArmOutcome(arm="b"), "c": arm("c", [], logprobs=[])}
    sample["d"] = sample["a"].model_copy(update={"arm": "d", "prompt_logprobs": [], "token_ids": [2**63]})
    got = stored_and_read(sample)
    assert got == sample
    assert got["a"].logprobs[0].logprob == -math.inf
    view = columns_of(sample)  # d holds an id beyond int64: left in its JSON, as v1 stored it
    assert pack_arms(sample) == v2_packer.pack_arms(sample)
    assert [view[k].packed for k in "abcd"] == [True, True, True, False]


def test_the_compare_key_sees_every_compared_difference() -> None:
    base = arm("a", [1, 2, 3])
    changes: dict[str, dict[str, Any]] = {
        "id": {"token_ids": [1, 2, 4]},
        "logprob": {"logprobs": [position(1), position(2, logprob=-0.2), position(3)]},
        "top": {"logprobs": [position(1), position(2, alternatives=[9, 8, 7, 6]), position(3)]},
        "token text": {"logprobs": [position(1), position(2).model_copy(update={"token": "x"}), position(3)]},
        "prompt": {"prompt_logprobs": []},
    }
    for what, update in changes.items():
        view = columns_of({"a": base, "b": base.model_copy(update={"arm": "b", **update})})
        assert view["a"].compare_key != view["b"].compare_key, what
    other_times = base.model_copy(update={"arm": "b", "token_times": [9.0], "text": "?"})
    timed = columns_of({"a": base, "b": other_times})
    assert timed["a"].compare_key == timed["b"].compare_key  # times and text are not compared
