"""What each compose arm ran with, recorded in the run's provenance from its telemetry.

On the CPU path abserve starts the servers itself and stores their arguments; under
``docker compose`` the arms are services, so the report service records them after the load
(``docker/run-report.sh``, after ``abserve prove``): each arm's command line as its API
server process saw it (with ``--revision``, the model revision the arms actually served),
the determinism settings its worker ran with as the plugin read them at its last flush
(``CUBLAS_WORKSPACE_CONFIG`` as vLLM set it, not as a config asked), and the model id and
revision the stack was given. Pure ``arm_record`` over telemetry records; ``main`` is the
thin CLI ``python -m abserve.deploy.record_arms RUN_ID --db URL --telemetry-root DIR``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from abserve.deploy.run_update import update_run
from abserve.records import RunInfo
from abserve.telemetry import ProcessTelemetry, read_telemetry


def arm_record(records: list[ProcessTelemetry]) -> dict[str, Any]:
    """An arm's server command line and its worker's determinism settings."""
    api = [r for r in records if r.role == "api_server" and r.argv]
    workers = [r for r in records if r.role == "worker"] or [r for r in records if r.role != "api_server"]
    latest = max(workers, key=lambda r: r.updated_at, default=None)
    return {
        "server_args": list(api[0].argv[1:]) if api else [],
        "environment": dict(latest.environment) if latest else {},
    }


def record(database_url: str, run_id: str, telemetry_root: Path, arms: list[str],
           model: dict[str, str]) -> dict[str, Any]:
    """Store each arm's record (server args, environment) and the model in the run."""
    recorded = {arm: arm_record(read_telemetry(telemetry_root / arm)) for arm in arms}

    def edit(run: RunInfo) -> None:
        for arm, rec in recorded.items():
            if arm in run.arms and rec["server_args"]:
                run.arms[arm].server_args = rec["server_args"]
        run.provenance.arm_environment = {arm: rec["environment"] for arm, rec in recorded.items()}
        run.provenance.model = dict(model)

    update_run(database_url, run_id, edit)
    return recorded


def main(argv: list[str] | None = None) -> int:
    """Record the arms; exit 4 (an error, as ``abserve report``'s) when it cannot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--db", required=True)
    parser.add_argument("--telemetry-root", type=Path, required=True)
    parser.add_argument("--arm", action="append", default=[], help="arm name (repeat)")
    parser.add_argument("--model", default="")
    parser.add_argument("--revision", default="")
    args = parser.parse_args(argv)
    try:
        recorded = record(args.db, args.run_id, args.telemetry_root, args.arm,
                          {"id": args.model, "revision": args.revision})
    except (OSError, ValueError) as exc:
        print(f"record_arms: {exc}", file=sys.stderr)
        return 4
    for arm, rec in sorted(recorded.items()):
        print(f"arm {arm}: {len(rec['server_args'])} server args, environment {rec['environment']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
