"""Read each side of ``abserve compare`` in one streamed pass: per run, numpy arrays of the few
latency metrics; per side, what equality needs.

A run of 100,000 requests is never held as request objects: every ``SavedRequest`` is folded
into growing float arrays (``array('d')``) of TTFT, TPOT, end-to-end latency and inter-token
gaps (the gaps thinned to evenly spaced order statistics past ``ITL_KEEP``, a sketch of their
distribution), then dropped. Outputs are kept only for the baseline side, keyed by
``prompt_key``, as digests (whole within a memory budget: ``abserve.saved.matching``); the
candidate side is matched as it streams.

The readers' entry point is ``open_saved`` (one import below: the seam where the readers of
``abserve.saved`` plug in).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from abserve.saved.matching import OutputMatcher
from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader
from abserve.saved.sources import open_saved

METRICS = ("ttft", "tpot", "itl", "e2e")
ITL_KEEP = 200_000  # inter-token gaps kept per run (evenly spaced order statistics beyond)


def _thin(values: array[float], keep: int) -> array[float]:
    """``keep`` evenly spaced order statistics of ``values`` (the distribution's sketch)."""
    ordered = np.sort(np.frombuffer(values, dtype=np.float64))
    idx = np.round(np.linspace(0, ordered.size - 1, keep)).astype(np.int64)
    return array("d", ordered[idx].tobytes())


@dataclass
class RunData:
    """One saved run, folded: its header, counts and per-metric value arrays (seconds)."""

    header: SavedRunHeader
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    output_tokens: int = 0
    values: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


class _Fold:
    """Accumulates one run's requests into arrays."""

    def __init__(self, itl_keep: int = ITL_KEEP) -> None:
        self.arrays = {m: array("d") for m in METRICS}
        self.itl_keep = itl_keep

    def add(self, r: SavedRequest) -> None:
        for metric, value in (("ttft", r.ttft), ("tpot", r.tpot), ("e2e", r.e2e)):
            if value is not None:
                self.arrays[metric].append(value)
        if r.itl:
            gaps = self.arrays["itl"]
            gaps.extend(r.itl)
            if len(gaps) > 2 * self.itl_keep:
                self.arrays["itl"] = _thin(gaps, self.itl_keep)

    def done(self) -> dict[str, np.ndarray]:
        out = {m: np.frombuffer(a, dtype=np.float64).copy() for m, a in self.arrays.items()}
        return {m: v[np.isfinite(v)] for m, v in out.items()}


def fold_run(run: SavedRun, matcher: OutputMatcher, side: str, itl_keep: int = ITL_KEEP) -> RunData:
    """Stream ``run``'s requests into a ``RunData``; ``matcher`` sees each request's output."""
    data, fold = RunData(run.header), _Fold(itl_keep)
    for r in run.requests:
        data.requests += 1
        matcher.see(side, r, data.header.source)
        if not r.ok:
            data.errors[r.error or "error"] += 1
            continue
        data.output_tokens += r.output_tokens or 0
        fold.add(r)
    data.values = fold.done()
    return data


@dataclass
class Sides:
    """Both sides, folded, with the outputs matched across them."""

    baseline: list[RunData]
    candidate: list[RunData]
    matcher: OutputMatcher

    def runs(self, side: str) -> list[RunData]:
        return self.baseline if side == "baseline" else self.candidate

    def metric_runs(self, side: str, metric: str) -> list[np.ndarray]:
        return [run.values.get(metric, np.empty(0)) for run in self.runs(side)]


def _same_model(headers: Iterable[SavedRunHeader]) -> None:
    """Refuse sides that served different models (one line naming the file and why)."""
    first: SavedRunHeader | None = None
    for h in headers:
        if h.model is None:
            continue
        if first is None:
            first = h
        elif h.model != first.model:
            raise SavedRunError(f"{h.source}: served model {h.model!r}, but {first.source} served "
                                f"{first.model!r}: the sides must run one model")


def read_sides(baseline: Sequence[str], candidate: Sequence[str], db: str | None,
               itl_keep: int = ITL_KEEP) -> Sides:
    """Open and fold every source (baseline first: its outputs are what candidates match)."""
    if not baseline or not candidate:
        raise SavedRunError("both --baseline and --candidate need at least one saved run")
    matcher = OutputMatcher()
    folded: dict[str, list[RunData]] = {"baseline": [], "candidate": []}
    for side, sources in (("baseline", baseline), ("candidate", candidate)):
        for source in sources:
            run = open_saved(source, db)
            _same_model([*(d.header for d in folded["baseline"] + folded["candidate"]), run.header])
            data = fold_run(run, matcher, side, itl_keep)
            if data.requests == 0:
                raise SavedRunError(f"{source}: no requests in the saved run")
            folded[side].append(data)
    return Sides(folded["baseline"], folded["candidate"], matcher)
