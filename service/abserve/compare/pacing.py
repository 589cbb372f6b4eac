"""Arms paced by the primary: the queueing the router itself made, found in the records.

With ``client_waits_for: primary`` the client's answer ends with the primary's, so a client
that sends its next request when an answer ends (every closed-loop load) paces itself on the
primary alone: a slower arm gets the next request before it has finished the last and builds a
queue the client never sees. Its latency then includes a wait the router created, and a
latency "regression" of the router's own making is indistinguishable from the candidate's.

The rule: a run recorded with ``primary`` is always stated; when the records show such a
queue (some other arm had more requests in flight at once than the primary ever had), no
latency gate may FAIL: a fail becomes inconclusive, with the measured queue as the reason.
Equality is unaffected. Runs with ``all_arms`` (the default) or no recorded setting (older
routers) are judged as before. Pure over the records.
"""

from __future__ import annotations

from collections.abc import Sequence

from abserve.compare.model import MetricLine
from abserve.model.records import Exchange, RunInfo


def peak_in_flight(exchanges: Sequence[Exchange], arm: str) -> int:
    """The most requests ``arm`` had in flight at once (sent and not yet ended)."""
    events: list[tuple[float, int]] = []
    for ex in exchanges:
        out = ex.arms.get(arm)
        if out is None or out.t_end is None:
            continue
        events += [(ex.started_at + out.t_send, 1), (ex.started_at + out.t_end, -1)]  # relative times
    peak = level = 0
    for _, step in sorted(events):  # at the same instant an end (-1) sorts before a send
        level += step
        peak = max(peak, level)
    return peak


def pacing_statement(run: RunInfo, exchanges: Sequence[Exchange]) -> tuple[str | None, bool]:
    """What the report says about primary pacing, and whether latency fails must be withheld."""
    if run.config.get("client_waits_for") != "primary":
        return None, False
    primary = str(run.config.get("primary", "a"))
    arms = sorted({a for ex in exchanges for a in ex.arms} - {primary})
    own = peak_in_flight(exchanges, primary)
    queued = {a: n for a in arms if (n := peak_in_flight(exchanges, a)) > own}
    head = (f"The router answered the client with arm {primary}'s answer alone "
            "(client_waits_for: primary): a closed-loop client paced itself on that arm only.")
    if not queued:
        return head + (f" No other arm had more requests in flight than {primary}'s {own}, so no "
                       "queue of the router's making is in the latencies."), False
    shown = ", ".join(f"{a} {n}" for a, n in queued.items())
    return head + (f" Other arms queued requests the client never saw (peak in flight: {primary} "
                   f"{own}, {shown}), so no latency gate may fail on this run; rerun with "
                   "client_waits_for: all_arms to decide latency."), True


def withhold_fails(lines: Sequence[MetricLine]) -> None:
    """Turn every latency fail into inconclusive (the queue may be the router's own)."""
    for line in lines:
        if line.outcome == "fail":
            line.outcome = "inconclusive"
            line.reason += ("; not a fail: the non-primary arms queued requests under primary "
                            "pacing (client_waits_for: primary), a wait the router made")
