"""The digest's typed columns give back exactly what was fed: every scalar of every arm's
``SlimOutcome`` and ``RequestLatency`` (None, -0.0, NaN and unhashable usage included) and
every ``PairDigest``, common shape or kept whole."""

from __future__ import annotations

import math
import struct
from array import array

from abserve.compare.equality import PairDigest
from abserve.compare.latency import RequestLatency
from abserve.compare.pair_digests import PairDigests
from abserve.compare.slim import SlimColumns, SlimExchange, grown
from abserve.model.records import SlimOutcome


def _outcome(arm: str, **changes: object) -> SlimOutcome:
    fields: dict[str, object] = dict(
        arm=arm, status=200, error_class=None, t_send=0.5, t_first_token=0.75, t_end=1.25,
        finish_reason="length", usage={"prompt_tokens": 7, "completion_tokens": 64},
        truncated=False, tokens=64, has_tokens=True)
    fields.update(changes)
    return SlimOutcome(**fields)  # type: ignore[arg-type]


def _bits(value: object) -> object:
    return struct.pack("<d", value) if isinstance(value, float) else value


def _same(a: object, b: object) -> bool:
    """Equal field by field, floats bit for bit (so -0.0 and NaN are told apart and matched)."""
    names = a.__slots__  # type: ignore[attr-defined]
    return type(a) is type(b) and all(
        _bits(getattr(a, n)) == _bits(getattr(b, n)) for n in names)


ARMS = {
    "a": (_outcome("a"), RequestLatency(0.25, 0.0079, 0.008, 0.75, 64)),
    "b": (_outcome("b", status=None, error_class="timeout", t_first_token=None, t_end=None,
                   finish_reason=None, usage=None, truncated=True, tokens=0, has_tokens=False), None),
    "a2": (_outcome("a2", t_send=-0.0, usage={"prompt_tokens": 7, "details": {"cached": 1}}),
           RequestLatency(-0.0, None, math.nan, None, 1)),
}


def test_every_arm_scalar_and_latency_reads_back_exactly() -> None:
    columns = SlimColumns()
    first = columns.append("r1", 12.5, {"profile": "p"}, ["h1"], ARMS)
    again = columns.append("r2", 13.0, {"profile": "p"}, [], {"a": ARMS["a"]})
    assert (first.started_at, first.tags, list(first.image_hashes)) == (12.5, {"profile": "p"}, ["h1"])
    assert again.tags is first.tags  # interned
    assert again.image_hashes == ()  # none kept
    assert list(first.arms) == ["a", "b", "a2"]
    assert "a2" in first.arms
    assert "x" not in first.arms
    assert list(again.arms) == ["a"]
    assert again.arms.get("b") is None
    for name, (outcome, latency) in ARMS.items():
        assert _same(first.arms[name], outcome)
        got = first.latencies()[name]
        assert (got is None) if latency is None else _same(got, latency)
    assert first.arms["a"].usage is again.arms["a"].usage  # one dict for equal usage


def test_pair_digests_of_the_common_shape_and_of_any_other_read_back_exactly() -> None:
    columns = SlimColumns()
    slim: dict[str, SlimExchange] = {}
    digests = PairDigests(slim)
    fed = []
    for i, tags in enumerate([{"profile": "p", "items": "2"}, {}, {"profile": "q"}, {}]):
        ex = slim[f"r{i}"] = columns.append(f"r{i}", float(i), tags, ["h"] * i, {"a": ARMS["a"]})
        profile, items = tags.get("profile", "untagged"), int(tags["items"]) if "items" in tags else i or None
        shapes = [
            PairDigest(ex.request_id, "identical", None, 0.0, None, 5, 0.0, None, True, False, True,
                       None, None, profile, items),
            PairDigest(ex.request_id, "identical", None, 0.0, None, None, None, None, False, False,
                       False, None, None, profile, items),
            PairDigest(ex.request_id, "identical", None, -0.0, None, None, None, None, False, False,
                       False, None, None, profile, items),  # -0.0: kept whole
            PairDigest(ex.request_id, "divergent", 3, 0.0, None, 0, 0.5, 1, False, True, False,
                       None, "empty", profile, items),
        ]
        digests.add(ex, shapes[i])
        fed.append(shapes[i])
    assert set(digests.whole) == {"r2", "r3"}
    assert list(digests) == ["r0", "r1", "r2", "r3"]
    for d in fed:
        assert _same(digests[d.request_id], d)


def test_narrow_columns_widen_for_values_that_do_not_fit() -> None:
    """Status, counts and interned indices start narrow; a value beyond reads back as fed."""
    columns = SlimColumns()
    huge = {"a": (_outcome("a", status=70_000, tokens=2**40), RequestLatency(0.1, 0.2, 0.3, 0.4, 2**33))}
    rows = [columns.append(f"r{i}", float(i), {"profile": f"p{i}"}, [], ARMS if i % 2 else huge)
            for i in range(300)]  # 300 distinct tags: their index outgrows a byte
    assert columns.tags_at.typecode == columns.status.typecode == columns.tokens.typecode == "q"
    for i, ex in enumerate(rows):
        assert ex.tags == {"profile": f"p{i}"}
        fed = ARMS if i % 2 else huge
        for name, (outcome, latency) in fed.items():
            assert _same(ex.arms[name], outcome)
            got = ex.latencies()[name]
            assert (got is None) if latency is None else _same(got, latency)
    assert grown(array("B", [1, 2]), -1).tolist() == [1, 2, -1]
