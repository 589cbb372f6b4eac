"""Whether a run's clients were answered before their exchanges were stored.

The router's default (``acknowledge: stored``) sends a client the final bytes of its answer
only once the exchange is committed to the store, so a crash of the router cannot lose an
exchange a client received in full. A run recorded with ``acknowledge: before_store`` (an
opt-in for speed, and what ``client_waits_for: primary`` needs) gave no such promise: the
report's first screen says so in one sentence. Runs recorded before the setting existed
(no ``acknowledge`` in their config) answered before the store too, but were judged without
this sentence before and are left so. Pure over the run's stored config.
"""

from __future__ import annotations

from abserve.model.records import RunInfo


def acknowledgement_statement(run: RunInfo) -> str | None:
    """The sentence for a run whose clients were answered before their records were stored."""
    if run.config.get("acknowledge") != "before_store":
        return None
    return ("The router answered clients before their exchanges were stored (acknowledge: "
            "before_store): a crash of the router may have lost exchanges a client received "
            "in full.")
