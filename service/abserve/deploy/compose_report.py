"""The compose report service's judgment: ``abserve report``, or a family's with several candidates.

``docker/run-report.sh`` ends with ``python -m abserve.deploy.compose_report RUN_ID --db URL
--out DIR --policy FILE`` (the arguments of ``abserve report``). A run with one candidate arm
is judged by exactly ``abserve report`` with those arguments. A run with two or more (compose
runs any number of candidate arms: ``abserve.deploy.compose_env``) is judged as ``abserve run``
judges one: every candidate against the one baseline with Holm's correction
(``abserve.launch.family.write_family_signoff``), each candidate's full report under
``OUT/vs-<candidate>/`` and the family's verdict, ``report.md``, ``report.json`` and
``junit.xml`` at the top of ``OUT``; the exit code is the family's. The roles are the ones the
router recorded with the run (each arm's ``role`` in the config's ``router.arms``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from abserve import exit_codes

Family = tuple[str, list[str], str | None]  # baseline, candidates, floor (abserve.launch.family)


def family_of_run(config: Mapping[str, object]) -> Family | None:
    """Baseline, candidates and floor from a run's recorded router config when it has two or
    more candidate arms, else None (the two-arm path, unchanged)."""
    arms = config.get("arms")
    if not isinstance(arms, Mapping):
        return None
    roles = {str(name): (spec.get("role") if isinstance(spec, Mapping) else None)
             for name, spec in arms.items()}
    baselines = [name for name, role in roles.items() if role == "baseline"]
    candidates = [name for name, role in roles.items() if role == "candidate"]
    floors = [name for name, role in roles.items() if role == "noise_floor"]
    if len(candidates) < 2 or len(baselines) != 1:
        return None
    return baselines[0], candidates, floors[0] if floors else None


def main(argv: list[str] | None = None) -> int:
    """Judge the run (see the module docstring); exits with the verdict's code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--policy", type=Path, required=True)
    known, _ = parser.parse_known_args(args)

    from abserve.report.commands import open_store

    try:
        store = open_store(known.db)
        try:
            run = store.get_run(known.run_id)
        finally:
            store.close()
    except Exception as exc:  # an error, never a verdict (1 would read as "fail")
        print(f"compose_report: the run could not be read: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    family = family_of_run(run.config) if run is not None else None
    if family is None:
        from abserve.cli import app

        app(["report", *args], prog_name="abserve")  # raises SystemExit with the report's code
        return exit_codes.USAGE
    from abserve.compare import load_policy
    from abserve.launch.family import write_family_signoff

    try:
        policy = load_policy(known.policy)
        judged = write_family_signoff(known.db, known.run_id, policy, known.policy, family, known.out)
    except Exception as exc:
        print(f"compose_report: the family of {family[1]} could not be judged: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print(judged.correction)
    for name, line in judged.candidates.items():
        print(f"  {judged.baseline} vs {name}: {line.verdict.upper()} (alpha {line.alpha:.4g}) "
              f"{known.out / f'vs-{name}' / 'report.md'}")
    print(f"verdict: {judged.verdict.upper()} (exit {judged.exit_code}) {known.out / 'report.md'}")
    return judged.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
