"""What ``abserve watch`` shows of a run, built from the store's records: pure, no I/O.

A ``Frame`` is one look at a run while it runs: its status, per arm the requests, errors and
output mismatches recorded so far (counted as the router's ``/metrics`` counts them, so the
watch of a ``docker compose`` run agrees with ``abserve run``'s own live table), the critical
gates of the latest interim judgment with their current intervals, and the clock (elapsed,
and what is left of a budget when one is known). It renders three ways: a plain multi-line
frame (``--once``, what the tests read), one status line per refresh (stdout not a terminal:
``docker logs``, CI logs) and a rich renderable for a terminal's ``Live`` panel, which reuses
the per-arm table of ``abserve.runs.progress``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text

from abserve.base.units import ms
from abserve.compare import Judgment
from abserve.compare.policy import ArmRoles, Policy
from abserve.model.provenance import RunProvenance
from abserve.model.records import Exchange, RunInfo
from abserve.runs.progress import Counts, counts_table

FINAL_STATUSES = frozenset({"completed", "interrupted"})  # RunInfo.status once the run ended


@dataclass(frozen=True)
class Gate:
    """One critical gate of the interim judgment: its outcome and interval (seconds, or a rate)."""

    name: str
    outcome: str
    low: float | None = None
    high: float | None = None
    threshold: float | None = None
    unit: str = "ms"  # "ms" (a latency difference), "ms/item" (a slope) or "rate" (mismatches)


@dataclass(frozen=True)
class Clock:
    """Seconds since the run started and what is left of its budget (None: no budget known)."""

    elapsed_s: float
    seconds_left: float | None = None
    requests_left: int | None = None


@dataclass(frozen=True)
class Frame:
    """One look at a run (see the module docstring)."""

    run_id: str
    status: str
    exchanges: int
    counts: Counts
    clock: Clock
    policy: str
    gates: list[Gate] = field(default_factory=list)
    judged_at: int | None = None  # exchanges the gates were judged on; None: not judged yet
    judge_note: str = ""

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES


# ---- counting -------------------------------------------------------------------------


def primary_arm(run: RunInfo, arms: Iterable[str], policy: Policy) -> str | None:
    """The arm the others are compared with: the router's ``primary``, else the baseline."""
    names = sorted(set(arms))
    for wanted in (run.config.get("primary"), policy.arms.baseline):
        if isinstance(wanted, str) and wanted in names:
            return wanted
    return names[0] if names else None


def count_arms(exchanges: Iterable[Exchange], primary: str | None) -> Counts:
    """Per arm: exchanges it took part in, its failed answers, and its answers whose token ids
    differ from the primary's (both answered; as ``abserve.router.metrics`` counts them)."""
    counts: Counts = {}
    for ex in exchanges:
        reference = ex.arms.get(primary) if primary is not None else None
        for name, outcome in ex.arms.items():
            c = counts.setdefault(name, {"requests": 0.0, "errors": 0.0, "mismatches": 0.0})
            c["requests"] += 1
            c["errors"] += 0 if outcome.ok else 1
            if (name != primary and reference is not None and reference.ok and outcome.ok
                    and outcome.token_ids != reference.token_ids):
                c["mismatches"] += 1
    return dict(sorted(counts.items()))


def roles_for_arms(policy: Policy, arms: Iterable[str], primary: str | None) -> Policy:
    """The policy's arm roles when the run has its baseline and candidate; else the primary (or
    the first arm) against the first other arm, so a by-hand run with other names is judged."""
    names = sorted(set(arms))
    if policy.arms.baseline in names and policy.arms.candidate in names:
        return policy
    baseline = primary if primary in names else (names[0] if names else policy.arms.baseline)
    others = [n for n in names if n != baseline]
    roles = ArmRoles(baseline=baseline, candidate=others[0] if others else policy.arms.candidate, floor=None)
    return policy.model_copy(update={"arms": roles})


# ---- gates and clock ------------------------------------------------------------------


def critical_gates(judgment: Judgment) -> list[Gate]:
    """The critical gates, equality first, with their current intervals."""
    gates: list[Gate] = []
    eq = judgment.equality_verdict
    if eq is not None and eq.critical:
        gates.append(Gate("equality", eq.outcome, eq.candidate_low, eq.candidate_high, eq.threshold, "rate"))
    for m in judgment.metrics:
        if m.critical:
            unit = "ms/item" if m.kind == "per_item" else "ms"
            gates.append(Gate(m.name, m.outcome, m.low, m.high, m.threshold, unit))
    return gates


def recorded_budget(provenance: RunProvenance) -> tuple[float | None, int | None]:
    """``(seconds, requests)`` of the budget the run's provenance records (``sequential.budget``
    once ``abserve run`` recorded its rounds, or a ``budget`` block), else ``(None, None)``."""
    seq = provenance.sequential
    if seq is not None and (seq.budget or "budget" in seq.model_fields_set):
        budget: object = seq.budget
    else:
        budget = (provenance.model_extra or {}).get("budget")
    if not isinstance(budget, Mapping):
        return None, None
    seconds, requests = budget.get("seconds"), budget.get("requests")
    return (float(seconds) if isinstance(seconds, int | float) else None,
            int(requests) if isinstance(requests, int) else None)


def run_clock(run: RunInfo, exchanges: int, now: float,
              budget: tuple[float | None, int | None] = (None, None)) -> Clock:
    """Elapsed time since the run started (to its end once ended) and the budget left; a
    budget given here wins over the one the run recorded."""
    elapsed = max((run.ended_at or now) - run.started_at, 0.0)
    recorded = recorded_budget(run.provenance)
    seconds = budget[0] if budget[0] is not None else recorded[0]
    requests = budget[1] if budget[1] is not None else recorded[1]
    return Clock(elapsed_s=elapsed,
                 seconds_left=None if seconds is None else max(seconds - elapsed, 0.0),
                 requests_left=None if requests is None else max(requests - exchanges, 0))


def judge_stride(judge_seconds: float, every_s: float, share: float = 0.25) -> int:
    """Judge every this many refreshes, so judging takes at most ``share`` of the watch's time."""
    if judge_seconds <= 0 or every_s <= 0:
        return 1
    return max(1, math.ceil(judge_seconds / (share * every_s)))


# ---- text ------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """``4m05s``, ``1h02m``, ``12s``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def clock_text(clock: Clock) -> str:
    parts = [f"elapsed {duration(clock.elapsed_s)}"]
    if clock.seconds_left is not None:
        parts.append(f"{duration(clock.seconds_left)} of the budget left")
    if clock.requests_left is not None:
        parts.append(f"{clock.requests_left} requests of the budget left")
    return ", ".join(parts)


def _value(x: float, unit: str) -> str:
    return f"{x:.4f}" if unit == "rate" else ms(x, unit=False)


def interval_text(gate: Gate) -> str:
    """``[-0.014, +0.056] ms, allowed +0.506`` (a latency gate) or ``mismatch rate in [0.0000,
    0.0037], allowed excess 0.0000`` (equality); an unbounded side reads ``?``."""
    if gate.low is None and gate.high is None:
        return "no interval yet"
    low = "?" if gate.low is None or not math.isfinite(gate.low) else _value(gate.low, gate.unit)
    high = "?" if gate.high is None or not math.isfinite(gate.high) else _value(gate.high, gate.unit)
    if gate.unit == "rate":
        allowed = "" if gate.threshold is None else f", allowed excess {_value(gate.threshold, 'rate')}"
        return f"mismatch rate in [{low}, {high}]{allowed}"
    allowed = "" if gate.threshold is None else f", allowed {_value(gate.threshold, gate.unit)}"
    return f"[{low}, {high}] {gate.unit}{allowed}"


def judged_text(frame: Frame) -> str:
    if frame.judged_at is None:
        return f"critical gates (policy {frame.policy}): not judged yet" + (
            f" ({frame.judge_note})" if frame.judge_note else "")
    note = f"; {frame.judge_note}" if frame.judge_note else ""
    return f"critical gates (policy {frame.policy}, judged on {frame.judged_at} exchanges{note}):"


def header_text(frame: Frame) -> str:
    return f"run {frame.run_id}: {frame.status}, {frame.exchanges} exchanges, {clock_text(frame.clock)}"


def plain_frame(frame: Frame) -> str:
    """The whole frame as plain text (``--once``)."""
    lines = [header_text(frame), f"{'arm':<10} {'requests':>9} {'errors':>7} {'mismatches':>11}"]
    for arm, c in frame.counts.items():
        lines.append(f"{arm:<10} {c['requests']:>9.0f} {c['errors']:>7.0f} {c['mismatches']:>11.0f}")
    lines.append(judged_text(frame))
    width = max((len(g.name) for g in frame.gates), default=0)
    lines += [f"  {g.name:<{width}}  {g.outcome:<12}  {interval_text(g)}" for g in frame.gates]
    return "\n".join(lines)


def status_line(frame: Frame) -> str:
    """One line per refresh, for logs."""
    arms = " ".join(f"{arm} {c['requests']:.0f} req/{c['errors']:.0f} err/{c['mismatches']:.0f} mism"
                    for arm, c in frame.counts.items())
    gates = "; ".join(f"{g.name} {g.outcome} {interval_text(g)}" for g in frame.gates) or "not judged yet"
    head = f"watch {frame.run_id}: {frame.status}, {frame.exchanges} exchanges, {clock_text(frame.clock)}"
    return f"{head} | {arms or 'no exchanges yet'} | {gates}"


def rich_frame(frame: Frame) -> Group:
    """The frame for a terminal's ``Live`` panel: header, the per-arm table, the gates table."""
    gates = Table(title=judged_text(frame).rstrip(":"), expand=False)
    for column in ("gate", "outcome", "interval"):
        gates.add_column(column)
    style = {"pass": "green", "fail": "bold red"}
    for g in frame.gates:
        gates.add_row(g.name, Text(g.outcome, style=style.get(g.outcome, "yellow")), interval_text(g))
    return Group(Text(header_text(frame), style="bold"), counts_table(frame.counts), gates)
