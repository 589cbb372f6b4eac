"""How a number is written for people: milliseconds and scaled values, in one place.

Judgments keep every duration in seconds; reports, reasons and check details show them in
milliseconds (or µs per item) with a fixed number of places. Each of those used to carry its
own small formatter (``_ms``, ``_fmt``, ``_us``, a Jinja filter...), differing only in the
sign, the unit suffix and the word for a missing value. They are all :func:`ms`, :func:`us`
and :func:`scaled` now.
A value that is ``None`` or not finite (an unbounded side of an interval, a statistic with no
data) is never printed as a number: it is the ``missing`` word (``n/a`` unless told) and never
``n/a ms``. Pure; no imports from the rest of abserve, so any layer may use it.
"""

from __future__ import annotations

import math

MISSING = "n/a"


def scaled(value: float | None, scale: float, places: int, *, signed: bool = True,
           missing: str = MISSING) -> str:
    """``value * scale`` with ``places`` decimals (and an explicit sign when ``signed``)."""
    if value is None or not math.isfinite(value):
        return missing
    return f"{value * scale:{'+' if signed else ''}.{places}f}"


def ms(seconds: float | None, *, signed: bool = True, unit: bool = True, places: int = 3,
       missing: str = MISSING) -> str:
    """Seconds as milliseconds: ``+1.234 ms`` by default; ``missing`` alone when there is none."""
    return _in_unit(seconds, 1e3, "ms" if unit else "", signed, places, missing)


def us(seconds: float | None, *, signed: bool = True, unit: bool = True, places: int = 2,
       missing: str = MISSING) -> str:
    """Seconds as microseconds: ``+12.30 µs`` by default; ``missing`` alone when there is none."""
    return _in_unit(seconds, 1e6, "µs" if unit else "", signed, places, missing)


def _in_unit(seconds: float | None, scale: float, suffix: str, signed: bool, places: int,
             missing: str) -> str:
    """``scaled`` with ``suffix`` after it (none when empty); the ``missing`` word alone."""
    if seconds is None or not math.isfinite(seconds):
        return missing
    text = scaled(seconds, scale, places, signed=signed)
    return f"{text} {suffix}" if suffix else text
