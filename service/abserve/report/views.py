"""What the report says about a judgment beyond its raw fields: units, the run's story, charts.

- ``cells``: a gate's table cells in the gate's own unit (ms for a shift or an improvement,
  µs per item for a per-item cost; no unit after a value that is not there).
- ``story``: the first screen's facts: why the run stopped (or that it was a single look),
  where the warm-up was cut, whether abserve controlled the arms' placement, the cost per item,
  whether the router restarted during the run, what traffic files sent and changed.
- ``gate_views``: per gate, the trajectory chart (estimate and anytime-valid band at every
  look, the allowance drawn) and the drift chart, or one line saying why there is none.
- ``sequential_log``: the looks ``abserve run`` recorded in the run's provenance.
- ``summary``: a short digest for ``report.json`` (next to, not inside, the judgment).

Pure: everything comes from the ``Judgment``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from markupsafe import Markup

from abserve.base.units import ms, scaled
from abserve.compare.model import DECIDED, Judgment, Look, MetricLine
from abserve.compare.tail_gate import share_allowance, slowed_span
from abserve.report import svg
from abserve.report.effect import failing_strata, gating
from abserve.report.imported import imported_statements
from abserve.report.load_seen import load_seen_statement
from abserve.report.restarts import restart_statement, router_restarts


def is_per_item(m: MetricLine) -> bool:
    return m.kind == "per_item"


def unit(m: MetricLine) -> tuple[str, float]:
    """The display unit of a gate and the factor from seconds to it."""
    return ("µs per item", 1e6) if is_per_item(m) else ("ms", 1e3)


def _digits(m: MetricLine) -> int:
    return 2 if is_per_item(m) else 3


def value(m: MetricLine, v: float | None, sign: bool = True) -> str:
    """One value of the gate with its unit, or ``n/a`` (never ``n/a ms``)."""
    if v is None or not math.isfinite(v):
        return "n/a"
    name, scale = unit(m)
    return f"{scaled(v, scale, _digits(m), signed=sign)} {name}"


def interval(m: MetricLine, low: float | None, high: float | None) -> str:
    """``[low, high] unit``; an unbounded side is shown as ∞ (not yet bounded)."""
    if low is None and high is None:
        return "not yet bounded" if m.trajectory else "n/a"
    name, scale = unit(m)
    lo = "−∞" if low is None else scaled(low, scale, _digits(m))
    hi = "+∞" if high is None else scaled(high, scale, _digits(m))
    return f"[{lo}, {hi}] {name}"


def span(m: MetricLine, est: float | None, low: float | None, high: float | None) -> str:
    """``estimate [low, high] unit`` (the unit once)."""
    if est is None or not math.isfinite(est):
        return interval(m, low, high)
    if low is None and high is None:
        return f"{value(m, est)} (not yet bounded)"
    return f"{scaled(est, unit(m)[1], _digits(m))} {interval(m, low, high)}"


def threshold(m: MetricLine) -> str:
    """What the gate allows (or, for an improvement, what it claims)."""
    if m.tail_share is not None:  # per request, never a level derived from the slowest requests
        return share_allowance(m.tail_share)
    if m.threshold is None:
        return "n/a"
    if m.kind == "improvement":
        return f"faster by ≥ {ms(-m.threshold, signed=False)}"
    if is_per_item(m):
        return f"≤ {value(m, m.threshold)}"
    return f"{m.direction} {value(m, m.threshold, sign=False)}"


def label(m: MetricLine) -> str:
    """The gate's name, with the stratum it is judged on."""
    return f"{m.name} (on {m.stratum})" if m.stratum else m.name


def cells(m: MetricLine) -> dict[str, str]:
    """The gate table's cells for one line, in the line's own unit."""
    per_arm = m.kind == "shift"
    proven = "" if m.tail_share is None else f"; {slowed_span(m.tail_share)}"
    return {
        "label": label(m),
        "gating": gating(m),
        "baseline": value(m, m.baseline_value, sign=False) if per_arm else "—",
        "candidate": value(m, m.candidate_value, sign=False) if per_arm else "—",
        "difference": value(m, m.estimate) + proven,
        "interval": interval(m, m.low, m.high),
        "span": span(m, m.estimate, m.low, m.high) + proven,
        "relative": "n/a" if m.relative is None else f"{m.relative:+.2%}",
        "threshold": threshold(m),
    }


# --- the sequential log that ``abserve run`` leaves in the provenance ----------------------


@dataclass(frozen=True)
class LookRow:
    round: int
    requests: int
    seconds: float | None
    gates: dict[str, str]


@dataclass(frozen=True)
class SequentialLog:
    """``provenance.sequential`` as the report shows it."""

    stop_reason: str
    rounds: int
    requests: int
    decided: bool
    budget: dict[str, object]
    looks: list[LookRow] = field(default_factory=list)

    @property
    def gate_names(self) -> list[str]:
        return list(dict.fromkeys(name for row in self.looks for name in row.gates))

    @property
    def seconds(self) -> float | None:
        return self.looks[-1].seconds if self.looks else None


def sequential_log(j: Judgment) -> SequentialLog | None:
    raw = j.provenance.sequential
    if raw is None:
        return None
    looks = [LookRow(round=row.round, requests=row.requests, seconds=row.seconds, gates=dict(row.gates))
             for row in raw.looks]
    return SequentialLog(stop_reason=raw.stop_reason or "no stop reason recorded", rounds=raw.rounds,
                         requests=raw.requests, decided=raw.decided, budget=dict(raw.budget), looks=looks)


def _budget(budget: dict[str, object]) -> str:
    parts = []
    if isinstance(budget.get("seconds"), int | float):
        parts.append(f"{budget['seconds']:.0f} s")
    if isinstance(budget.get("requests"), int | float):
        parts.append(f"{budget['requests']} requests")
    return " and ".join(parts) or "no limit"


# --- the first screen ------------------------------------------------------------------------


@dataclass(frozen=True)
class Story:
    """The facts a reviewer needs before the tables."""

    stop: str
    stop_decided: bool
    warmup: str
    placement: str | None  # None: placement controlled (nothing to warn about)
    headlines: list[str]
    restarts: str | None = None  # the router's restarts during the run (report/restarts.py)
    traffic: list[str] = field(default_factory=list)  # traffic files (report/imported.py)
    load_seen: str = ""  # the load's answers against the store (report/load_seen.py)
    load_missing: bool = False  # some answers the load received are not in the store


def placement_biases(j: Judgment) -> dict[str, float]:
    """``policy.sequential.unknown_placement_bias`` of the judgment's policy (seconds)."""
    seq = j.policy.get("sequential")
    raw = seq.get("unknown_placement_bias") if isinstance(seq, dict) else None
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}


def placement_statement(j: Judgment) -> str | None:
    if j.placement_known:
        return None
    text = ("The arms' placement was not controlled by abserve (the exchanges carry no placement "
            "tags, as in a by-hand router run or against external URLs): part of any latency "
            "difference may come from where each server ran. ")
    biases = placement_biases(j)
    if not biases:
        return text + ("This policy assumes no placement bias (sequential.unknown_placement_bias is "
                       "empty), so a latency fail here may be the placement's doing.")
    shown = ", ".join(f"{k} {ms(v, signed=False)}" for k, v in sorted(biases.items()))
    return text + (f"A latency gate fails only when its effect exceeds the allowance plus the assumed "
                   f"placement bias ({shown}; policy sequential.unknown_placement_bias).")


def stop_sentence(j: Judgment) -> tuple[str, bool]:
    """Why the run stopped, and whether that was a decision."""
    log = sequential_log(j)
    if log is not None:
        secs = "" if log.seconds is None else f", {log.seconds:.0f} s"
        head = "Stopped: " + log.stop_reason.rstrip(".")
        return (f"{head} ({log.rounds} rounds, {log.requests} requests{secs}; "
                f"budget {_budget(log.budget)})."), log.decided
    if j.sequential:
        return (f"Sequential judgment at {j.looks} looks (anytime-valid intervals, valid whenever the "
                "run stopped); the run was not driven by abserve's rounds, so no stop rule was "
                "applied."), j.verdict in DECIDED
    return (f"Fixed-sample judgment: a single look at the {j.exchanges_judged} judged exchanges "
            "(its intervals hold for this one look only)."), j.verdict in DECIDED


def story(j: Judgment) -> Story:
    stop, decided = stop_sentence(j)
    warm = j.warmup_detail or f"{j.exchanges_warmup} warm-up exchanges cut"
    heads = [f"Cost per item ({m.metric}): {span(m, m.estimate, m.low, m.high)}, {m.outcome}"
             for m in j.metrics if is_per_item(m)]
    placement = " ".join(t for t in (placement_statement(j), j.pacing) if t) or None
    seen, missing = load_seen_statement(j)
    return Story(stop, decided, f"Warm-up: {warm}.", placement, heads,
                 restart_statement(j), imported_statements(j), seen, missing)


# --- trajectory and drift charts ---------------------------------------------------------------


@dataclass(frozen=True)
class GateView:
    """A gate's charts, or the line saying why it has none."""

    line: MetricLine
    chart: Markup | None
    note: str
    drift_chart: Markup | None
    drift_note: str
    primary: bool  # critical, or a claim (improvement / per item): shown first


def _bounded(looks: Sequence[Look], scale: float) -> list[svg.Point]:
    return [svg.Point(lk.n, lk.estimate * scale, lk.low * scale, lk.high * scale)
            for lk in looks if lk.estimate is not None and lk.low is not None and lk.high is not None]


def _refs(m: MetricLine, j: Judgment) -> list[svg.Reference]:
    name, scale = unit(m)
    refs: list[svg.Reference] = []
    thr = m.threshold
    if thr is not None and m.kind == "shift":
        shown = f"{scaled(thr, scale, 3, signed=False)} {name}"
        if m.direction in ("increase", "either"):
            refs.append(svg.Reference(thr * scale, f"allowed increase +{shown}"))
        if m.direction in ("decrease", "either"):
            refs.append(svg.Reference(-thr * scale, f"allowed decrease −{shown}"))
        bias = placement_biases(j).get(m.metric, 0.0)
        if not j.placement_known and bias > 0 and m.direction != "decrease":
            refs.append(svg.Reference((thr + bias) * scale, "allowance + assumed placement bias",
                                      "#d62728", "2,3"))
    elif thr is not None and m.kind == "improvement":
        faster = scaled(-thr, scale, 3, signed=False)
        claim = "claim: faster than the baseline" if thr == 0 else f"claim: faster by ≥ {faster} ms"
        refs.append(svg.Reference(thr * scale, claim, "#2ca02c"))
    elif thr is not None:
        refs.append(svg.Reference(thr * scale, f"allowed {scaled(thr, scale, 2)} {name}"))
    if all(abs(r.value) > 1e-12 for r in refs):
        refs.append(svg.Reference(0.0, "", "#999", "1,2"))
    return refs


def _color(outcome: str) -> str:
    return {"pass": "#2ca02c", "fail": "#d62728"}.get(outcome, "#e08a00")


def _missing(m: MetricLine, what: str, looks: Sequence[Look], bounded: int) -> str:
    if not looks:
        if m.kind == "shift" and m.statistic != "mean":
            return f"{m.name}: no {what}: a fixed-sample gate, judged once at the end."
        return f"{m.name}: no {what}: no look was judged ({m.reason})."
    return (f"{m.name}: no {what}: {bounded} of {len(looks)} looks had a bounded interval; "
            "a chart needs at least 2.")


def gate_view(m: MetricLine, j: Judgment) -> GateView:
    name, scale = unit(m)
    points = _bounded(m.trajectory, scale)
    chart, note = None, ""
    if len(points) >= 2:
        title = f"{label(m)}: {m.outcome} at n={m.trajectory[-1].n}"
        chart = svg.trajectory(points, _refs(m, j), title, f"{m.metric} difference ({name})",
                               color=_color(m.outcome))
    else:
        note = _missing(m, "trajectory chart", m.trajectory, len(points))
    drift_chart, drift_note = None, ""
    if m.drift is not None:
        dpoints = _bounded(m.drift.trajectory, scale)
        state = "unstable" if m.drift.unstable else "stable"
        if len(dpoints) >= 2:
            refs = []
            if m.threshold:
                shown = f"{scaled(m.threshold, scale, 3, signed=False)} {name}"
                refs = [svg.Reference(m.threshold * scale, f"+allowance {shown}"),
                        svg.Reference(-m.threshold * scale, f"−allowance {shown}")]
            refs.append(svg.Reference(0.0, "", "#999", "1,2"))
            drift_chart = svg.trajectory(
                dpoints, refs, f"{m.name} drift over the run: {state}",
                f"change of the difference ({name})",
                color="#d62728" if m.drift.unstable else "#9467bd", height=200)
        else:
            drift_note = _missing(m, "drift chart", m.drift.trajectory, len(dpoints))
    return GateView(m, chart, note, drift_chart, drift_note, m.critical or m.kind != "shift")


def gate_views(j: Judgment) -> list[GateView]:
    """One view per gate: primary gates (critical, claims) first, then the others."""
    views = [gate_view(m, j) for m in j.metrics]
    return [v for v in views if v.primary] + [v for v in views if not v.primary]


def drift_sentence(m: MetricLine) -> str:
    """The drift of a gate over the run in one phrase (empty when not measured)."""
    if m.drift is None:
        return ""
    d = m.drift
    state = "UNSTABLE" if d.unstable else "stable"
    return f"{span(m, d.estimate, d.low, d.high)} ({state})"


def first_last(m: MetricLine) -> tuple[str, str, int]:
    """The first bounded look and the last look as text, and how many looks there were."""
    bounded = [lk for lk in m.trajectory if lk.low is not None and lk.high is not None]
    if not bounded:
        return "not yet bounded", "not yet bounded", len(m.trajectory)
    first, last = bounded[0], m.trajectory[-1]
    return (f"n={first.n}: {interval(m, first.low, first.high)}",
            f"n={last.n}: {interval(m, last.low, last.high)}", len(m.trajectory))


# --- report.json ---------------------------------------------------------------------------------


def summary(j: Judgment) -> dict[str, object]:
    """A short digest of the judgment for ``report.json`` (SI units; the model is beside it)."""
    log = sequential_log(j)
    st = story(j)
    eq = j.equality_verdict
    return {
        "verdict": j.verdict,
        "exit_code": j.exit_code,
        "sequential": j.sequential,
        "looks": j.looks,
        "stop": st.stop,
        "stop_reason": None if log is None else log.stop_reason,
        "rounds": None if log is None else log.rounds,
        "requests": None if log is None else log.requests,
        "decided": None if log is None else log.decided,
        "warmup": j.warmup_detail,
        "exchanges_judged": j.exchanges_judged,
        "placement_known": j.placement_known,
        "placement_statement": st.placement,
        "pacing": j.pacing,
        "router_restarts": len(router_restarts(j)),
        "router_restart_statement": st.restarts,
        "load_seen": None if j.provenance.load_seen is None else j.provenance.load_seen.model_dump(),
        "load_seen_statement": st.load_seen,
        "equality": None if eq is None or not j.equality else {
            "outcome": eq.outcome, "mismatches": j.equality[0].summary.mismatches,
            "comparable": j.equality[0].comparable, "rate_high": eq.candidate_high,
            "drift_tolerance": eq.drift_tolerance},
        "per_image": {t.metric: {"slope": t.slope, "low": t.low, "high": t.high, "unit": "s per item"}
                      for t in j.trends},
        "failing_strata": failing_strata(j),
        "gates": [
            {
                "name": m.name,
                "kind": m.kind,
                "stratum": m.stratum,
                "critical": m.critical,
                "outcome": m.outcome,
                "unit": "s per item" if is_per_item(m) else "s",
                "estimate": m.estimate,
                "low": m.low,
                "high": m.high,
                "threshold": m.threshold,
                "drift_unstable": None if m.drift is None else m.drift.unstable,
            }
            for m in j.metrics
        ],
    }
