"""Change one stored run in place, for the report service's recorders (record_arms, record_load).

Under ``docker compose`` abserve did not start the arms or the load, so the report service
adds what they did to the run after the fact: open the store the report will judge, load the
run (a clear error if there is none), let the caller edit it, write it back, close.
"""

from __future__ import annotations

from collections.abc import Callable

from abserve.records import RunInfo


def update_run(database_url: str, run_id: str, edit: Callable[[RunInfo], None]) -> None:
    """Apply ``edit`` to run ``run_id`` and store it; ``ValueError`` when there is no such run."""
    from abserve.store import Store

    with Store.open(database_url) as store:
        run = store.get_run(run_id)
        if run is None:
            raise ValueError(f"no run {run_id!r} in the store")
        edit(run)
        store.update_run(run)
