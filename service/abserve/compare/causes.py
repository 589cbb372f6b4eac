"""Why a gate was held open: the cause a line records, so the first screen names it. Pure.

A latency line whose interval would decide can be held open by four things, and the user's
remedy differs for each, so the report must not say one for another:

- ``neighbours``: foreign load on the arms' cores (``abserve.compare.contamination``): free
  the cores, or move the arms;
- ``drift``: the paired difference moved over the run (``abserve.compare.gates``; a tail
  proven over the run but not in each half of it, ``abserve.compare.quantile_cs``): look for
  what changed during the run;
- ``placement``: where the arms ran may explain the difference (a placement bias comparable
  to the allowance, or a placement abserve did not control): counterbalance the placement;
- ``warmup``: the drift is the arms still warming up after the warm-up cut
  (``abserve.compare.warmup``): warm up longer.

The module that holds a line records its cause with ``hold``; ``name_drift_causes`` then
names the drift of the lines held without one, and tells a warm-up from any other drift.
"""

from __future__ import annotations

from collections.abc import Sequence

from abserve.base.units import ms
from abserve.compare.model import Cause, CauseKind, MetricLine
from abserve.compare.policy import Policy
from abserve.compare.warmup import Latencies, transient_cut
from abserve.model.records import Exchange

HELD = frozenset({"unstable", "inconclusive"})


def hold(line: MetricLine, kind: CauseKind, detail: str) -> None:
    """Record that ``kind`` (``detail``: its facts, in words) held ``line`` open."""
    line.cause = Cause(kind=kind, detail=detail)


UNCONTROLLED = "a placement abserve did not control"  # the ``where`` of a run placed by its operator


def placement_detail(bias: float, where: str, threshold: float) -> str:
    """A placement bias that could explain the difference, against the allowance."""
    share = f", {abs(bias) / threshold:.0%} of the allowance" if threshold > 0 else ""
    return f"the placement bias of {ms(abs(bias), signed=False)} ({where}{share}) may explain it"


def drift_detail(line: MetricLine) -> str:
    """The drift of a line, measured when its drift guard measured it."""
    d = line.drift
    if d is None or d.low is None or d.high is None:
        return "the difference moved over the run (a block of slower requests, not a steady shift)"
    return f"the difference drifted by {ms(d.estimate)} [{ms(d.low)}, {ms(d.high)}] over the run"


def name_drift_causes(lines: Sequence[MetricLine], judged: list[Exchange], lat: Latencies,
                      policy: Policy) -> None:
    """Give the unstable lines held without a cause theirs: the drift, or the warm-up when the
    compared arms were still settling in the judged exchanges (an initial transient that
    MSER-5 still finds after the warm-up cut, ``abserve.compare.warmup.transient_cut``)."""
    drifting = [m for m in lines if m.outcome == "unstable" and (m.cause is None or m.cause.kind == "drift")]
    if not drifting:
        return
    arms = [policy.arms.baseline, policy.arms.candidate]
    cut = transient_cut(judged, lat, arms, policy.sequential.max_warmup_fraction)
    for line in drifting:
        if cut.index > 0:
            hold(line, "warmup", f"arm {cut.arm}'s {cut.metric} on {cut.kind} requests was still "
                                 f"settling until exchange {cut.index} of the {len(judged)} judged")
        elif line.cause is None:
            hold(line, "drift", drift_detail(line))
