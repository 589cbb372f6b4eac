"""A sign-off written: the run judged from its store, its report files, its ledger entry.

Every report written for a run with a store records (or replaces) the run's ledger row, so the
report and the ledger never disagree; the ledger write never fails the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from abserve.report.judging import judge_run, judge_with_evidence, judged_by, open_store, read_policy

if TYPE_CHECKING:
    from abserve.compare import Policy
    from abserve.report import ReportPaths


def build_report(
    db: str, run_id: str, out: Path, policy_path: Path, baseline_id: str | None = None,
    policy: Policy | None = None,
) -> ReportPaths:
    """Judge ``run_id`` (and ``baseline_id``) from the store at ``db`` and write the report
    (under ``policy`` when given, else the one read from ``policy_path``)."""
    from abserve.ledger.book import record_signoff
    from abserve.report import write_report

    policy = policy or read_policy(policy_path)
    with open_store(db) as store:
        judgment, evidence = judge_with_evidence(store, run_id, policy)
        baseline = judge_run(store, baseline_id, policy) if baseline_id else None
    judgment.provenance.judged_by = judged_by()
    paths = write_report(judgment, out, baseline=baseline, exchanges=evidence)
    record_signoff(db, judgment, out)  # the run's ledger entry; never fails the report
    return paths
