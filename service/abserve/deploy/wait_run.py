"""Wait until the router has finished writing a run, before the report judges it.

Under ``docker compose`` the report starts when the load is done; the router then still
drains the streams in flight and marks the run completed (``docker/run-router.sh`` stops it
once the load wrote its exit code). Compose cannot express "the router finished this run":
a dependency on the router container completing would also fire when the router is restarted
mid-run (the container exits, and ``docker compose up`` gives up on everything after it), so
the report service asks the store instead. It waits while the run's effective status is
``running`` (a router alive and flushing; one that died reads ``interrupted`` once its
heartbeat is stale) and returns 0 when it is ``completed`` or ``interrupted`` (the report
then judges, and an interrupted run is invalid), 1 when the deadline passes, 4 on errors.
``python -m abserve.deploy.wait_run RUN_ID --db URL [--timeout-s S]`` (run-report.sh).
"""

from __future__ import annotations

import argparse
import sys
import time

POLL_S = 1.0


def wait_for_run(database_url: str, run_id: str, timeout_s: float) -> str | None:
    """The run's status once it is no longer ``running``; ``None`` at the deadline."""
    from abserve.store import Store

    deadline = time.monotonic() + timeout_s
    with Store.open(database_url) as store:
        while True:
            run = store.get_run(run_id)
            if run is None:
                raise ValueError(f"no run {run_id!r} in the store")
            if run.status != "running":
                return run.status
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--db", required=True)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    try:
        status = wait_for_run(args.db, args.run_id, args.timeout_s)
    except (OSError, ValueError) as exc:
        print(f"wait_run: {exc}", file=sys.stderr)
        return 4
    if status is None:
        print(f"wait_run: run {args.run_id!r} still running after {args.timeout_s:.0f} s", file=sys.stderr)
        return 1
    print(f"wait_run: run {args.run_id!r} is {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
