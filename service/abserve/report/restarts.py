"""What the report says when the router restarted during the run.

A router restarted under the same run id with ``resume`` reopens its run and records the
restart in the run's provenance (``router_restarts``, written by ``Store.resume_run``); the
judgment carries the run's provenance, so the report reads it there. A restart alone does
not invalidate the run: the requests sent while the router was down reached neither arm, so
they are missing from both sides alike, and the client-side failures of that gap are judged
where the load's errors are. The report states it as a fact of the run.

Pure: everything comes from the ``Judgment``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from abserve.compare.model import Judgment

MAX_LISTED = 5  # restarts named one by one; more are counted


@dataclass(frozen=True)
class Restart:
    """One restart of the router within the run."""

    at: float | None  # Unix time the restarted router reopened the run
    previous_status: str  # "completed" (it had stopped cleanly) or "interrupted"


def router_restarts(j: Judgment) -> list[Restart]:
    """The restarts recorded in the judgment's provenance, oldest first."""
    return [Restart(r.at, r.previous_status)
            for r in j.provenance.router_restarts]


def _utc(at: float | None) -> str:
    return "an unrecorded time" if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                  time.gmtime(at))


def _one(r: Restart) -> str:
    how = {"completed": "after a clean stop", "interrupted": "after an interruption"}
    return f"{_utc(r.at)} {how.get(r.previous_status, f'after a stop ({r.previous_status})')}"


def restart_statement(j: Judgment) -> str | None:
    """One sentence on the router's restarts; None when it ran through."""
    found = router_restarts(j)
    if not found:
        return None
    n = len(found)
    listed = "; ".join(_one(r) for r in found[:MAX_LISTED])
    if n > MAX_LISTED:
        listed += f"; and {n - MAX_LISTED} more"
    text = (f"The router restarted {n} time{'' if n == 1 else 's'} during the run (at {listed}): "
            "requests sent while it was down reached neither arm.")
    if any(r.previous_status == "interrupted" for r in found):
        text += (" Where it had been interrupted, the exchanges still in flight were not "
                 "recorded (none whose client had its whole answer, unless the router answered "
                 "before storing: acknowledge: before_store, or a router older than that "
                 "setting, which could also lose up to 0.5 s of finished ones).")
    return text
