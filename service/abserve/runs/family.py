"""``abserve run`` with several candidates: interim and final family judgments, and their report.

An experiment with two or more ``candidate`` arms is judged as a family
(``abserve.compare.family``: each candidate against the baseline, Holm-corrected); with one
candidate nothing here is used and the two-arm path is unchanged. The sign-off writes each
candidate's full report (the usual four files, judged at its Holm level) under
``OUT/vs-<candidate>/`` and, at the top of ``OUT``, the family's ``report.md`` (verdict, the
correction stated, one line per candidate, which arm is best per images-per-request bucket,
every arm's provenance), ``report.json`` and ``junit.xml`` (a verdict case, one per
candidate). Those two are rendered by ``abserve.report.family_md``; this module judges and writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from abserve.compare.family import Family, FamilyJudgment, family_judgment, judge_family, roles_for
from abserve.compare.judge import judge_digest
from abserve.report.family_md import family_junit, family_markdown
from abserve.runs.looks import IncrementalLooks

if TYPE_CHECKING:
    from abserve.compare import Judgment
    from abserve.compare.policy import Policy
    from abserve.config import ExperimentConfig
    from abserve.model.records import Exchange, RunInfo



def family_of(config: ExperimentConfig) -> Family | None:
    """Baseline, candidates and floor when the experiment has two or more candidates, else None."""
    candidates = config.arms_with_role("candidate")
    floors = config.arms_with_role("noise_floor")
    if len(candidates) < 2:
        return None
    return config.baseline, candidates, floors[0] if floors else None


def interim_family(run: RunInfo, exchanges: list[Exchange] | IncrementalLooks, policy: Policy,
                   family: Family) -> FamilyJudgment:
    """The family judgment of a running run (its status and proofs come later), for the stop rule.
    ``exchanges``: the exchanges, or the run's looks made with ``family`` and ``policy``, already
    updated (each candidate's digest at each Holm level)."""
    running = run.model_copy(update={"status": "completed", "arms": {}})
    if not isinstance(exchanges, IncrementalLooks):
        return judge_family(running, exchanges, policy, *family)
    looks, (baseline, candidates, floor) = exchanges, family

    def judge_at(name: str, level: float) -> Judgment:
        judged_as = roles_for(policy, baseline, name, floor, level)
        return judge_digest(running, looks.family_digest(name, level), judged_as)

    return family_judgment(judge_at, policy, baseline, candidates, floor)


def write_family_signoff(db: str, run_id: str, policy: Policy, policy_path: Path, family: Family,
                         out: Path) -> FamilyJudgment:
    """Judge the stored run as a family and write its reports (see the module docstring)."""
    from abserve.ledger.signoff import build_report
    from abserve.report.judging import open_store

    store = open_store(db)
    try:
        run = store.get_run(run_id)
        if run is None:
            raise ValueError(f"no run {run_id!r} in the store")
        judged = judge_family(run, list(store.iter_exchanges(run_id)), policy, *family)
    finally:
        store.close()
    baseline, _, floor = family
    for name, line in judged.candidates.items():
        build_report(db, run_id, out / f"vs-{name}", policy_path,
                     policy=roles_for(policy, baseline, name, floor, line.alpha))
    (out / "report.json").write_text(json.dumps({"run_id": run_id, **judged.model_dump(mode="json")},
                                                indent=1))
    (out / "report.md").write_text(family_markdown(judged, run))
    (out / "junit.xml").write_text(family_junit(judged, run_id))
    return judged
