"""``abserve.base.units``: milliseconds and scaled values as every report, reason and check writes them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abserve.base.units import ms, scaled, us


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, "+1.235 ms"),
    ({"signed": False}, "1.235 ms"),
    ({"unit": False}, "+1.235"),
    ({"signed": False, "unit": False}, "1.235"),
    ({"places": 4, "signed": False}, "1.2346 ms"),
])
def test_ms_writes_seconds_as_milliseconds(kwargs: dict[str, Any], expected: str) -> None:
    assert ms(0.0012346, **kwargs) == expected


def test_ms_shows_the_sign_of_a_negative_value_always() -> None:
    assert ms(-0.002) == "-2.000 ms"
    assert ms(-0.002, signed=False) == "-2.000 ms"
    assert ms(0.0) == "+0.000 ms"


@pytest.mark.parametrize("missing_value", [None, math.inf, -math.inf, math.nan])
def test_a_missing_value_is_the_missing_word_alone_never_with_a_unit(missing_value: float | None) -> None:
    assert ms(missing_value) == "n/a"
    assert ms(missing_value, unit=False, missing="unbounded") == "unbounded"
    assert scaled(missing_value, 1e6, 2) == "n/a"
    assert us(missing_value) == "n/a"


def test_scaled_uses_the_scale_and_places_given() -> None:
    assert scaled(0.0000123, 1e6, 2) == "+12.30"
    assert scaled(0.0000123, 1e6, 2, signed=False) == "12.30"


@given(st.floats(min_value=-1e3, max_value=1e3, allow_nan=False))
def test_ms_is_scaled_by_a_thousand_with_its_unit(seconds: float) -> None:
    assert ms(seconds) == scaled(seconds, 1e3, 3) + " ms"
    assert float(ms(seconds, unit=False)) == pytest.approx(seconds * 1e3, abs=5e-4)


def test_us_writes_seconds_as_microseconds_with_two_places_unless_told() -> None:
    assert us(0.0000123) == "+12.30 µs"
    assert us(-0.0000123, places=3, unit=False) == "-12.300"
    assert us(0.0000123, signed=False) == "12.30 µs"
