"""How a compose run's load ended, recorded in the run's provenance for the report to judge.

Under ``docker compose`` the Locust master is a service of its own (``docker/run-load.sh``).
Its end reaches the report only through the run folder: ``load/exit_code`` (written by
run-load.sh: 0, or the first profile's non-zero Locust exit: 2 setup, 3 error rate over the
limit, 4 a worker lost) and one summary per Locust process and profile
(``load/<profile>/node-*.json``: its stop reason, requests planned, sent and failed at the
client). A load that ended early, or whose client saw too many requests fail (requests the
router never answered are no exchange, so the store cannot count them), makes the run
invalid (``abserve.compare.verdict.load_reasons``); the report states why.
Pure ``load_outcome`` over the folder; ``main`` is the thin CLI
``python -m abserve.deploy.record_load RUN_ID --db URL --load-dir DIR`` (run-report.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from abserve.deploy.run_update import update_run
from abserve.records import RunInfo


def _profile(folder: Path) -> dict[str, Any]:
    """One profile's summaries: the master's stop reason and the workers' counts summed."""
    out: dict[str, Any] = {"profile": folder.name, "stop_reason": None,
                           "planned": 0, "sent": 0, "failures": 0}
    for path in sorted(folder.glob("node-*.json")):
        try:
            node = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(node, dict):
            continue
        if node.get("node") in ("master", "local") or out["stop_reason"] is None:
            out["stop_reason"] = node.get("stop_reason") or out["stop_reason"]
        for key in ("planned", "sent", "failures"):
            value = node.get(key)
            out[key] += value if isinstance(value, int) else 0
    return out


def load_outcome(load_dir: Path) -> dict[str, Any]:
    """``{"exit_code": int | None, "profiles": [...]}``; ``None``: no exit code was written."""
    try:
        code: int | None = int((load_dir / "exit_code").read_text().strip())
    except (OSError, ValueError):
        code = None
    profiles = [_profile(p) for p in sorted(load_dir.iterdir()) if p.is_dir()] if load_dir.is_dir() else []
    return {"exit_code": code, "profiles": profiles}


def record(database_url: str, run_id: str, outcome: dict[str, Any]) -> None:
    """Store ``outcome`` as the run's ``provenance.load``."""

    def edit(run: RunInfo) -> None:
        run.provenance.load = outcome

    update_run(database_url, run_id, edit)


def main(argv: list[str] | None = None) -> int:
    """Record the load's end; exit 4 (an error, as ``abserve report``'s) when it cannot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--db", required=True)
    parser.add_argument("--load-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    outcome = load_outcome(args.load_dir)
    try:
        record(args.db, args.run_id, outcome)
    except (OSError, ValueError) as exc:
        print(f"record_load: {exc}", file=sys.stderr)
        return 4
    shown = ", ".join(f"{p['profile']}: {p['sent']}/{p['planned']} sent, {p['failures']} failed, "
                      f"{p['stop_reason']}" for p in outcome["profiles"])
    print(f"load: exit {outcome['exit_code']}; {shown or 'no profile summaries'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
