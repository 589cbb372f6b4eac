"""Per-request latency metrics of one arm, read from the router's timestamps, and throughput.

Definitions follow ``vllm bench serve`` (all in seconds, relative to the arm's ``t_send``):

- ``ttft``: time to the first output token;
- ``tpot``: time per output token after the first, ``(e2e - ttft) / (output_tokens - 1)``;
- ``itl``: inter-token latency; per request the median gap between consecutive tokens
  (all gaps are also returned for pooled distributions);
- ``e2e``: end-to-end latency, to the end of the stream.

A metric is None when the arm did not produce what it needs (error, no tokens, one token for
tpot/itl), so a failed request never enters a latency statistic. Pure functions.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from abserve.model.records import ArmOutcome, Exchange, SlimOutcome

METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True, slots=True)
class RequestLatency:
    """The latency metrics of one arm for one exchange (None = not measurable)."""

    ttft: float | None
    tpot: float | None
    itl: float | None
    e2e: float | None
    output_tokens: int
    gaps: tuple[float, ...] = field(default=())

    def get(self, metric: str) -> float | None:
        value: float | None = getattr(self, metric)
        return value


def output_tokens(outcome: ArmOutcome | SlimOutcome) -> int:
    """Output token count: usage when reported, else the tokens the router saw."""
    if outcome.usage and "completion_tokens" in outcome.usage:
        return int(outcome.usage["completion_tokens"])
    if isinstance(outcome, SlimOutcome):
        return outcome.tokens
    return max(len(outcome.token_ids), len(outcome.token_times))


def request_latency(outcome: ArmOutcome, *, keep_gaps: bool = True) -> RequestLatency | None:
    """Latency metrics of one arm's answer, or None when the arm failed or sent no token;
    ``keep_gaps=False`` leaves out the per-token gaps (the digest keeps only the metrics)."""
    if not outcome.ok or outcome.truncated or outcome.t_first_token is None:
        return None
    return _latency(outcome.t_send, outcome.t_first_token, outcome.t_end, output_tokens(outcome),
                    outcome.token_times, keep_gaps)


def request_latency_times(times: np.ndarray, slim: SlimOutcome) -> RequestLatency | None:
    """``request_latency(..., keep_gaps=False)`` of a stored outcome: its scalars in
    ``slim``, its token times as an array (``abserve.model.token_columns.RawExchange``)."""
    if not slim.ok or slim.truncated or slim.t_first_token is None:
        return None
    return _latency(slim.t_send, slim.t_first_token, slim.t_end, output_tokens(slim), times, False)


def _latency(t_send: float, t_first_token: float, t_end: float | None, n: int,
             times: Sequence[float] | np.ndarray, keep_gaps: bool) -> RequestLatency:
    ttft = t_first_token - t_send
    e2e = None if t_end is None else t_end - t_send
    tpot = None if e2e is None or n < 2 else (e2e - ttft) / (n - 1)
    diffs = np.diff(np.asarray(times, dtype=np.float64)) if len(times) > 1 else None
    itl = _median(diffs) if diffs is not None else None
    gaps = tuple(diffs.tolist()) if keep_gaps and diffs is not None else ()
    return RequestLatency(ttft=ttft, tpot=tpot, itl=itl, e2e=e2e, output_tokens=n, gaps=gaps)


def _median(values: np.ndarray) -> float:
    """``np.median`` of one request's gaps, bit for bit, at a tenth of its cost on a few dozen
    values: numpy takes the mean of the middle value(s), a sum that starts at ``+0.0`` (so
    ``-0.0`` only where the halving of a negative sum underflows: ``[0.0, -5e-324]``); a NaN
    takes numpy's way (the sort would misplace it)."""
    if np.isnan(values).any():
        return float(np.median(values))
    ordered: list[float] = sorted(values.tolist())
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return 0.0 + ordered[mid]
    return (0.0 + ordered[mid - 1] + ordered[mid]) / 2


class PairedValues(Protocol):
    """Latencies that read a paired sample straight from columns (``slim.RunLatencies``)."""

    def paired_values(self, exchanges: Sequence[object], metric: str, baseline: str,
                      candidate: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...


@dataclass
class PairedSample:
    """Aligned per-request values of one metric on a baseline and a candidate arm: float64
    arrays, and ``index``, each pair's position in the exchanges it was drawn from (what each
    pair carries, its tags, is read from there on demand: no per-pair Python object kept)."""

    metric: str
    baseline: np.ndarray
    candidate: np.ndarray
    index: np.ndarray  # int64 positions in ``exchanges``
    exchanges: Sequence[Exchange]
    diffs: np.ndarray = field(init=False)  # candidate - baseline, as Python's ``c - b``

    def __post_init__(self) -> None:
        self.diffs = self.candidate - self.baseline

    def paired(self) -> Iterator[Exchange]:
        """The exchange of each pair, in order."""
        return (self.exchanges[i] for i in self.index.tolist())

    @property
    def request_ids(self) -> list[str]:
        return [ex.request_id for ex in self.paired()]

    @property
    def profiles(self) -> list[str]:
        return [ex.tags.get("profile", "untagged") for ex in self.paired()]

    @property
    def items(self) -> list[int | None]:
        return [items_of(ex) for ex in self.paired()]

    @property
    def blocks(self) -> list[str | None]:
        return [ex.tags.get("block") for ex in self.paired()]


def paired_sample(
    exchanges: list[Exchange],
    latencies: Mapping[str, Mapping[str, RequestLatency | None]],
    metric: str,
    baseline: str,
    candidate: str,
) -> PairedSample:
    """Requests where both arms measured ``metric``, aligned; ``latencies[request_id][arm]``.
    A digest's latencies (``PairedValues``) are read from its columns, without a
    ``RequestLatency`` or a Python float per request."""
    reader = getattr(latencies, "paired_values", None)
    columns = reader(exchanges, metric, baseline, candidate) if reader is not None else None
    if columns is not None:
        b, c, at = columns
        return PairedSample(metric, b, c, at, exchanges)
    base, cand, index = array("d"), array("d"), array("q")
    for i, ex in enumerate(exchanges):
        per_arm = latencies.get(ex.request_id, {})
        lb, lc = per_arm.get(baseline), per_arm.get(candidate)
        vb = lb.get(metric) if lb else None
        vc = lc.get(metric) if lc else None
        if vb is None or vc is None:
            continue
        base.append(vb)
        cand.append(vc)
        index.append(i)
    return PairedSample(metric, _floats(base), _floats(cand), np.array(index, dtype=np.int64), exchanges)


def arm_values(exchanges: list[Exchange], latencies: Mapping[str, Mapping[str, RequestLatency | None]],
               arm: str, metric: str) -> np.ndarray:
    """Arm ``arm``'s measured ``metric`` over ``exchanges``, in order (from a digest's columns
    where ``latencies`` has them); ``latencies[request_id]`` must hold every exchange."""
    reader = getattr(latencies, "arm_values", None)
    got = reader(exchanges, metric, arm) if reader is not None else None
    if got is not None:
        return np.asarray(got, dtype=np.float64)
    values = array("d")
    for ex in exchanges:
        if (rl := latencies[ex.request_id].get(arm)) and (v := rl.get(metric)) is not None:
            values.append(v)
    return _floats(values)


def _floats(values: array[float]) -> np.ndarray:
    return np.array(values, dtype=np.float64)


class Tagged(Protocol):
    """What ``items_of`` reads: an ``Exchange`` or a digest's ``SlimExchange``."""

    @property
    def tags(self) -> dict[str, str]: ...

    @property
    def image_hashes(self) -> Sequence[str]: ...


def items_of(exchange: Tagged) -> int | None:
    """Images (items) in the request, from the load generator's ``items`` tag."""
    raw = exchange.tags.get("items")
    if raw is None:
        return len(exchange.image_hashes) or None
    try:
        return int(raw)
    except ValueError:
        return None


@dataclass(frozen=True)
class Throughput:
    """Work one arm completed over the span of its requests (wall clock)."""

    requests: int
    output_tokens: int
    seconds: float

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0


def throughput(exchanges: list[Exchange], arm: str) -> Throughput:
    """Successful requests and output tokens of ``arm`` per second from first send to last end."""
    starts, ends, tokens, count = [], [], 0, 0
    for ex in exchanges:
        outcome = ex.arms.get(arm)
        if outcome is None or not outcome.ok or outcome.t_end is None:
            continue
        starts.append(ex.started_at + outcome.t_send)
        ends.append(ex.started_at + outcome.t_end)
        tokens += output_tokens(outcome)
        count += 1
    span = (max(ends) - min(starts)) if count else 0.0
    return Throughput(requests=count, output_tokens=tokens, seconds=span)
