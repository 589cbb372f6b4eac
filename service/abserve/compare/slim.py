"""What the streaming judgment keeps of every exchange, as columns: a few hundred bytes each.

``Digester`` (``abserve.compare.digest``) keeps, per exchange, its start time, tags, each arm's
scalar outcome (status, times, usage, finish reason, truncation, token count) and latency
metrics. Held as one pydantic ``Exchange``, three ``SlimOutcome``s with their boxed floats and
usage dicts and three ``RequestLatency``s, that was ~3.3 KB an exchange: a soak of a million
exchanges would need ~5 GiB for its digest alone (issue 30). Here every scalar goes into
one typed array per field (``array.array``: 8 bytes a float, no object header), the values
many exchanges share (tags, usage, finish reasons, error classes, arm names) are interned
once, and each exchange is one small ``SlimExchange`` (its request id and row numbers). An
integer column starts as narrow as its values usually are (a byte for an interned index, 16
bits for a status, 32 for a count) and widens to 64 bits once one does not fit (``grown``).

The judgment reads a ``SlimExchange`` as it read the slim ``Exchange``: ``request_id``,
``started_at``, ``tags``, ``image_hashes`` and ``arms`` (a read-only mapping whose values are
``SlimOutcome``s built on access); ``SlimColumns.latencies(ex)`` is the mapping of arm to
``RequestLatency`` the judgment's ``lat[request_id]`` was. The gates read whole columns
instead: ``RunLatencies.paired_values`` / ``arm_values`` / ``arm_series`` give a metric over
a list of exchanges as float64 arrays (numpy views of the columns, indexed, never kept: an
exported buffer would stop the column from growing), without a Python object per exchange.
Values come back exactly as fed (floats are stored as doubles, ``None`` as a flag bit).
Pure: no I/O.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import numpy as np

from abserve.compare.latency import METRICS, RequestLatency
from abserve.model.records import ErrorClass, SlimOutcome

T = TypeVar("T")

# Flag bits of one arm's row.
_STATUS_NONE, _FIRST_NONE, _END_NONE, _TRUNCATED, _HAS_TOKENS = 1, 2, 4, 8, 16
_NO_LATENCY, _TTFT_NONE, _TPOT_NONE, _ITL_NONE, _E2E_NONE = 32, 64, 128, 256, 512
_METRIC_NONE = {"ttft": _TTFT_NONE, "tpot": _TPOT_NONE, "itl": _ITL_NONE, "e2e": _E2E_NONE}
NO_IMAGES: tuple[str, ...] = ()


class Interned(Generic[T]):
    """Distinct values by a hashable key, each stored once; rows keep the value's index."""

    def __init__(self) -> None:
        self.values: list[T] = []
        self._index: dict[Hashable, int] = {}

    def index(self, key: Hashable, value: T) -> int:
        at = self._index.get(key)
        if at is None:
            at = self._index[key] = len(self.values)
            self.values.append(value)
        return at


def value_key(value: dict[str, Any] | None) -> Hashable:
    """A key equal only for equal dicts of equal value types (``1``, ``1.0`` and ``True``
    stay apart); a dict holding an unhashable value is its own key (never shared)."""
    if value is None:
        return None
    key = tuple((k, type(v), v) for k, v in value.items())
    try:
        hash(key)
    except TypeError:
        return ("unshared", id(value))
    return key


def grown(column: array[int], value: int) -> array[int]:
    """``column`` with ``value`` appended: an integer column starts narrow (a byte for an
    index into a few interned values, 16 or 32 bits for a status or a count) and is copied
    to 64 bits the first time a value does not fit, so every value comes back as fed."""
    try:
        column.append(value)
    except OverflowError:
        column = array("q", column.tolist())
        column.append(value)
    return column


def _or_zero(value: float | None) -> float:
    return 0.0 if value is None else value


class SlimColumns:
    """The per-exchange and per-arm scalars of a digest, one typed array per field."""

    def __init__(self) -> None:
        self.started_at = array("d")
        self.tags_at = array("B")  # index into ``tags`` (each index column widens as it must: ``grown``)
        self.layout_at = array("B")  # index into ``layouts``: the exchange's arm names, in order
        self.first_arm = array("I")  # the exchange's first row in the arm columns
        self.images: dict[int, list[str]] = {}  # image hashes of the rows that keep any
        self.tags: Interned[dict[str, str]] = Interned()
        self.layouts: Interned[tuple[str, ...]] = Interned()
        self.errors: Interned[ErrorClass | None] = Interned()
        self.finishes: Interned[str | None] = Interned()
        self.usages: Interned[dict[str, int] | None] = Interned()
        self.flags = array("H")
        self.status = array("h")
        self.error_at = array("B")
        self.finish_at = array("B")
        self.usage_at = array("B")
        self.tokens = array("i")
        self.times = array("d")  # t_send, t_first_token, t_end per arm row
        self.latency = array("d")  # ttft, tpot, itl, e2e per arm row
        self.output_tokens = array("i")

    def append(self, request_id: str, started_at: float, tags: dict[str, str],
               image_hashes: list[str], arms: Mapping[str, tuple[SlimOutcome, RequestLatency | None]]
               ) -> SlimExchange:
        """Store one exchange's scalars; the ``SlimExchange`` that reads them back."""
        row = len(self.started_at)
        self.started_at.append(started_at)
        self.tags_at = grown(self.tags_at, self.tags.index(value_key(tags), tags))
        names = tuple(arms)
        self.layout_at = grown(self.layout_at, self.layouts.index(names, names))
        self.first_arm.append(len(self.flags))
        if image_hashes:
            self.images[row] = list(image_hashes)
        for outcome, latency in arms.values():
            self._append_arm(outcome, latency)
        return SlimExchange(request_id, row, self)

    def _append_arm(self, o: SlimOutcome, rl: RequestLatency | None) -> None:
        flags = ((o.status is None) * _STATUS_NONE | (o.t_first_token is None) * _FIRST_NONE
                 | (o.t_end is None) * _END_NONE | o.truncated * _TRUNCATED | o.has_tokens * _HAS_TOKENS)
        self.status = grown(self.status, 0 if o.status is None else o.status)
        self.error_at = grown(self.error_at, self.errors.index(o.error_class, o.error_class))
        self.finish_at = grown(self.finish_at, self.finishes.index(o.finish_reason, o.finish_reason))
        self.usage_at = grown(self.usage_at, self.usages.index(value_key(o.usage), o.usage))
        self.tokens = grown(self.tokens, o.tokens)
        self.times.extend((o.t_send, _or_zero(o.t_first_token), _or_zero(o.t_end)))
        if rl is None:
            flags |= _NO_LATENCY
            self.latency.extend((0.0, 0.0, 0.0, 0.0))
            self.output_tokens = grown(self.output_tokens, 0)
        else:
            flags |= ((rl.ttft is None) * _TTFT_NONE | (rl.tpot is None) * _TPOT_NONE
                      | (rl.itl is None) * _ITL_NONE | (rl.e2e is None) * _E2E_NONE)
            self.latency.extend((_or_zero(rl.ttft), _or_zero(rl.tpot), _or_zero(rl.itl), _or_zero(rl.e2e)))
            self.output_tokens = grown(self.output_tokens, rl.output_tokens)
        self.flags.append(flags)

    def metric_values(self, rows: np.ndarray, k: int, none_bit: int,
                      arm: str) -> tuple[np.ndarray, np.ndarray]:
        """Latency metric ``k`` (``METRICS`` order) of arm ``arm`` at exchange ``rows``, and
        where it was measured (the exchange has the arm, its latency and that metric)."""
        at, has = self._arm_at(rows, arm)
        flags = _view(self.flags)
        if not len(flags):
            return np.zeros(len(rows)), has
        ok = has & ((flags[at] & (_NO_LATENCY | none_bit)) == 0)
        return _view(self.latency)[4 * at + k], ok

    def prompt_tokens(self, rows: np.ndarray, arm: str) -> np.ndarray:
        """The usage's ``prompt_tokens`` of arm ``arm`` at exchange ``rows`` (0: none reported)."""
        at, has = self._arm_at(rows, arm)
        table = np.array([(u or {}).get("prompt_tokens") or 0 for u in self.usages.values], dtype=np.float64)
        return np.where(has, table[_view(self.usage_at)[at]], 0.0) if len(table) else np.zeros(len(rows))

    def _arm_at(self, rows: np.ndarray, arm: str) -> tuple[np.ndarray, np.ndarray]:
        """Arm ``arm``'s rows in the arm columns at exchange ``rows`` (0 where it has none), and
        which exchanges have it."""
        slot = np.array([names.index(arm) if arm in names else -1 for names in self.layouts.values],
                        dtype=np.int64)[_view(self.layout_at)[rows]]
        has = slot >= 0
        return np.where(has, _view(self.first_arm)[rows] + slot, 0), has

    def outcome(self, name: str, at: int) -> SlimOutcome:
        """The ``SlimOutcome`` of arm row ``at`` (arm ``name``)."""
        flags, t = self.flags[at], 3 * at
        return SlimOutcome(
            arm=name, status=None if flags & _STATUS_NONE else self.status[at],
            error_class=self.errors.values[self.error_at[at]],
            t_send=self.times[t], t_first_token=None if flags & _FIRST_NONE else self.times[t + 1],
            t_end=None if flags & _END_NONE else self.times[t + 2],
            finish_reason=self.finishes.values[self.finish_at[at]],
            usage=self.usages.values[self.usage_at[at]], truncated=bool(flags & _TRUNCATED),
            tokens=self.tokens[at], has_tokens=bool(flags & _HAS_TOKENS))

    def request_latency(self, at: int) -> RequestLatency | None:
        """The ``RequestLatency`` (without gaps) of arm row ``at``."""
        flags = self.flags[at]
        if flags & _NO_LATENCY:
            return None
        ttft, tpot, itl, e2e = self.latency[4 * at:4 * at + 4]
        return RequestLatency(None if flags & _TTFT_NONE else ttft, None if flags & _TPOT_NONE else tpot,
                              None if flags & _ITL_NONE else itl, None if flags & _E2E_NONE else e2e,
                              self.output_tokens[at])  # positional: a third cheaper, read per gate


def _view(column: array[Any]) -> np.ndarray:
    """A column as a numpy array without a copy; never to be kept (the exported buffer would
    keep the column from growing: ``BufferError`` on the next append)."""
    return np.frombuffer(column, dtype=np.dtype(column.typecode))


class SlimExchange:
    """One digested exchange: what the judgment reads of a slim ``Exchange``, from columns."""

    __slots__ = ("columns", "request_id", "row")

    def __init__(self, request_id: str, row: int, columns: SlimColumns) -> None:
        self.request_id = request_id
        self.row = row
        self.columns = columns

    @property
    def started_at(self) -> float:
        return self.columns.started_at[self.row]

    @property
    def tags(self) -> dict[str, str]:
        return self.columns.tags.values[self.columns.tags_at[self.row]]

    @property
    def image_hashes(self) -> list[str] | tuple[str, ...]:
        return self.columns.images.get(self.row, NO_IMAGES)

    @property
    def arm_names(self) -> tuple[str, ...]:
        return self.columns.layouts.values[self.columns.layout_at[self.row]]

    def arm_row(self, name: str) -> int | None:
        """The row of arm ``name`` in the arm columns, None when the exchange has no such arm."""
        columns, row = self.columns, self.row
        names = columns.layouts.values[columns.layout_at[row]]
        return columns.first_arm[row] + names.index(name) if name in names else None

    @property
    def arms(self) -> ArmsView:
        return ArmsView(self)

    def latencies(self) -> LatenciesView:
        """Arm name -> its ``RequestLatency`` (None: not measurable)."""
        return LatenciesView(self)


class _ArmRows(Mapping[str, T]):
    """A read-only mapping over one exchange's arm rows, values built on access."""

    __slots__ = ("exchange",)

    def __init__(self, exchange: SlimExchange) -> None:
        self.exchange = exchange

    def _value(self, name: str, at: int) -> T:
        raise NotImplementedError

    def __getitem__(self, name: str) -> T:
        at = self.exchange.arm_row(name)
        if at is None:
            raise KeyError(name)
        return self._value(name, at)

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's, without its try/except
        at = self.exchange.arm_row(name)
        return default if at is None else self._value(name, at)

    def __contains__(self, name: object) -> bool:
        return name in self.exchange.arm_names

    def __iter__(self) -> Iterator[str]:
        return iter(self.exchange.arm_names)

    def __len__(self) -> int:
        return len(self.exchange.arm_names)


class ArmsView(_ArmRows[SlimOutcome]):
    """Arm name -> ``SlimOutcome`` of one digested exchange."""

    __slots__ = ()

    def _value(self, name: str, at: int) -> SlimOutcome:
        return self.exchange.columns.outcome(name, at)


class LatenciesView(_ArmRows["RequestLatency | None"]):
    """Arm name -> ``RequestLatency`` (or None) of one digested exchange."""

    __slots__ = ()

    def _value(self, name: str, at: int) -> RequestLatency | None:
        return self.exchange.columns.request_latency(at)


class RunLatencies(Mapping[str, LatenciesView]):
    """Request id -> its arms' latencies: the judgment's ``lat``, over a digest's exchanges."""

    __slots__ = ("exchanges",)

    def __init__(self, exchanges: Mapping[str, SlimExchange]) -> None:
        self.exchanges = exchanges

    def __getitem__(self, request_id: str) -> LatenciesView:
        return self.exchanges[request_id].latencies()

    def get(self, request_id: str, default: Any = None) -> Any:  # Mapping's, without its try/except
        ex = self.exchanges.get(request_id)
        return default if ex is None else LatenciesView(ex)

    def __iter__(self) -> Iterator[str]:
        return iter(self.exchanges)

    def __len__(self) -> int:
        return len(self.exchanges)

    def paired_values(self, exchanges: Sequence[object], metric: str, baseline: str,
                      candidate: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``latency.paired_sample``'s values, read from the columns: the baseline's and the
        candidate's ``metric`` where both measured it, and their positions in ``exchanges``;
        None unless every exchange is this digest's own (the caller then reads them one by one)."""
        rows = self._rows(exchanges, metric)
        if rows is None:
            return None
        b, b_ok = self._metric_values(exchanges, rows, metric, baseline)
        c, c_ok = self._metric_values(exchanges, rows, metric, candidate)
        index = np.flatnonzero(b_ok & c_ok)
        return b[index], c[index], index

    def arm_values(self, exchanges: Sequence[object], metric: str, arm: str) -> np.ndarray | None:
        """Arm ``arm``'s measured ``metric`` over ``exchanges``, in order; None as ``paired_values``."""
        rows = self._rows(exchanges, metric)
        if rows is None:
            return None
        values, ok = self._metric_values(exchanges, rows, metric, arm)
        kept: np.ndarray = values[ok]
        return kept

    def arm_series(self, exchanges: Sequence[object], metric: str, arm: str,
                   per_prompt_token: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """Arm ``arm``'s ``metric`` at every exchange and where it was measured (divided by the
        usage's prompt tokens where ``per_prompt_token`` and reported); None as ``paired_values``."""
        rows = self._rows(exchanges, metric)
        if rows is None:
            return None
        values, ok = self._metric_values(exchanges, rows, metric, arm)
        if per_prompt_token and len(rows):
            prompt = cast(SlimExchange, exchanges[0]).columns.prompt_tokens(rows, arm)
            values = np.where(prompt != 0, values / np.where(prompt != 0, prompt, 1.0), values)
        return values, ok

    def _rows(self, exchanges: Sequence[object], metric: str) -> np.ndarray | None:
        """The exchanges' rows in the columns, when each is the one this mapping holds."""
        own = self.exchanges
        if metric not in _METRIC_NONE or not all(
                isinstance(ex, SlimExchange) and own.get(ex.request_id) is ex for ex in exchanges):
            return None
        return np.fromiter((cast(SlimExchange, ex).row for ex in exchanges), dtype=np.int64,
                           count=len(exchanges))

    @staticmethod
    def _metric_values(exchanges: Sequence[object], rows: np.ndarray, metric: str,
                       arm: str) -> tuple[np.ndarray, np.ndarray]:
        if not len(rows):
            return np.zeros(0), np.zeros(0, dtype=bool)
        columns = cast(SlimExchange, exchanges[0]).columns
        return columns.metric_values(rows, METRICS.index(metric), _METRIC_NONE[metric], arm)
