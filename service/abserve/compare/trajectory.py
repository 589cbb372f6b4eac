"""A sequential gate's looks: one ``Look`` each, kept as columns (``Looks``) on the judgment.

A gate of a sequential judgment keeps its interval at every look (``MetricLine.trajectory``,
``Drift.trajectory``): a soak of 100,000 exchanges judged every 16 keeps ~87,000 looks over
its paths. As ``Look`` objects (a slotted dataclass, its floats and int boxed) that was ~170
bytes a look, ~150 bytes an exchange of the judgment's peak (issue 30). ``Looks`` keeps them
as typed arrays (33 bytes a look: the count, three doubles and a flag byte for the ``None``s)
and builds a ``Look`` on access; it is a read-only ``Sequence[Look]``, so the report reads a
trajectory as it read the list. ``Trajectory`` is the field's type: validated from a list of
``Look``s or of their dicts (``report.json`` read back), dumped as that list's dicts, so the
JSON is the same. Values come back exactly as stored (doubles; ``None`` as a flag bit).
Pure.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any, overload

from pydantic import PlainSerializer, PlainValidator, TypeAdapter
from pydantic.dataclasses import dataclass

_NO_ESTIMATE, _NO_LOW, _NO_HIGH = 1, 2, 4


@dataclass(slots=True)
class Look:
    """One look of a sequential gate: pairs seen, the estimate, its anytime-valid interval.

    A validated dataclass with slots, not a ``BaseModel``: a model's ``__dict__`` and
    fields-set made each ~590 bytes; dumped and validated as a model's field, the same JSON.
    A judgment keeps its gates' looks as ``Looks`` (columns), this is one of them read back."""

    n: int
    estimate: float | None = None
    low: float | None = None  # None: not yet bounded
    high: float | None = None


def _or_zero(value: float | None) -> float:
    return 0.0 if value is None else value


class Looks(Sequence[Look]):
    """A gate's looks in order, as columns; each ``Look`` built on access."""

    __slots__ = ("_n", "_none", "_values")

    def __init__(self, looks: Iterable[Look] = ()) -> None:
        self._n = array("q")
        self._values = array("d")  # estimate, low, high of each look (0.0 where None)
        self._none = array("B")  # which of the three are None
        for lk in looks:
            self.append(lk.n, lk.estimate, lk.low, lk.high)

    def append(self, n: int, estimate: float | None, low: float | None, high: float | None) -> None:
        """Add the next look."""
        self._n.append(n)
        self._values.extend((_or_zero(estimate), _or_zero(low), _or_zero(high)))
        self._none.append((estimate is None) * _NO_ESTIMATE | (low is None) * _NO_LOW
                          | (high is None) * _NO_HIGH)

    def _fields(self, i: int) -> tuple[int, float | None, float | None, float | None]:
        none, v = self._none[i], 3 * i
        return (self._n[i], None if none & _NO_ESTIMATE else self._values[v],
                None if none & _NO_LOW else self._values[v + 1],
                None if none & _NO_HIGH else self._values[v + 2])

    def _look(self, i: int) -> Look:
        n, estimate, low, high = self._fields(i)
        return Look(n=n, estimate=estimate, low=low, high=high)

    @overload
    def __getitem__(self, index: int) -> Look: ...

    @overload
    def __getitem__(self, index: slice) -> Looks: ...

    def __getitem__(self, index: int | slice) -> Look | Looks:
        chosen = range(len(self._n))[index]  # IndexError as a list's; negative indices too
        if isinstance(chosen, range):
            return Looks(self._look(i) for i in chosen)
        return self._look(chosen)

    def __iter__(self) -> Iterator[Look]:
        return (self._look(i) for i in range(len(self._n)))

    def __len__(self) -> int:
        return len(self._n)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same looks (a list of ``Look`` included)."""
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return list(self) == list(other)

    def __repr__(self) -> str:
        return f"Looks({list(self)!r})"

    def dump(self) -> list[dict[str, Any]]:
        """The looks as ``list[Look]`` dumps them: one dict each, fields in order."""
        return [dict(zip(_FIELDS, self._fields(i), strict=True)) for i in range(len(self._n))]


_FIELDS = ("n", "estimate", "low", "high")
_LOOK_LIST: TypeAdapter[list[Look]] = TypeAdapter(list[Look])


def looks_of(value: Any) -> Looks:
    """``value`` as ``Looks``: itself when it is one, else validated as a list of ``Look``
    (``Look``s or their dicts)."""
    return value if isinstance(value, Looks) else Looks(_LOOK_LIST.validate_python(value))


def dump_looks(looks: Sequence[Look]) -> list[dict[str, Any]]:
    """A trajectory's JSON: one dict a look (a plain list of ``Look`` set on a line too)."""
    return (looks if isinstance(looks, Looks) else Looks(looks)).dump()


Trajectory = Annotated[Sequence[Look], PlainValidator(looks_of), PlainSerializer(dump_looks)]
