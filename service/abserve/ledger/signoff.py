"""A sign-off written: the run judged from its store, its report files, its ledger entry.

A run's ledger row is its sign-off: its verdict under the policy recorded with the run (what
``abserve run`` judged with, arm roles included; ``RunProvenance.policy``). A report under that
policy records (or replaces) the row, so the report and the ledger never disagree; a report under
another policy (``abserve report RUN --policy other.yaml``: a re-judgment, to explore) writes its
files and leaves the row alone, as does a two-arm report of a run whose row is its family's
(several candidates). A run that recorded no policy (a by-hand run) has each report as its row.
``abserve accept`` therefore decides on the sign-off. The ledger write never fails the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from abserve.report.judging import judge_run, judge_with_evidence, judged_by, open_store, read_policy

if TYPE_CHECKING:
    from abserve.compare import Policy
    from abserve.model.records import RunInfo
    from abserve.report import ReportPaths
    from abserve.store import Store


def build_report(
    db: str, run_id: str, out: Path, policy_path: Path, baseline_id: str | None = None,
    policy: Policy | None = None, note: Callable[[str], None] | None = None,
) -> ReportPaths:
    """Judge ``run_id`` (and ``baseline_id``) from the store at ``db`` and write the report
    (under ``policy`` when given, else the one read from ``policy_path``); record it as the run's
    ledger row when it is the sign-off, else say why not to ``note`` (see the module docstring)."""
    from abserve.ledger.book import record_signoff
    from abserve.report import write_report

    policy = policy or read_policy(policy_path)
    with open_store(db) as store:
        judgment, evidence = judge_with_evidence(store, run_id, policy)
        baseline = judge_run(store, baseline_id, policy) if baseline_id else None
        run = store.get_run(run_id)
        why_not = None if run is None else rejudgment(store, run, policy)
    judgment.provenance.judged_by = judged_by()
    paths = write_report(judgment, out, baseline=baseline, exchanges=evidence)
    if why_not is None:
        record_signoff(db, judgment, out)  # the run's ledger entry; never fails the report
    elif note is not None:
        note(f"ledger: not written, {why_not}; the run's row keeps its sign-off's verdict")
    return paths


def rejudgment(store: Store, run: RunInfo, policy: Policy) -> str | None:
    """Why a report of ``run`` under ``policy`` is not its sign-off, or None when it is."""
    from abserve.compare import Policy
    from abserve.ledger.book import LedgerError, entry_of

    own = run.provenance.policy
    if own is not None:
        try:
            recorded = Policy.model_validate(own).model_dump(mode="json")
        except ValueError:
            return "a re-judgment: the policy recorded with the run cannot be read by this abserve"
        if recorded != policy.model_dump(mode="json"):
            where = f" from {run.provenance.policy_file}" if run.provenance.policy_file else ""
            return (f"a re-judgment: policy {policy.name!r} is not the one recorded with the run "
                    f"({recorded.get('name')!r}{where})")
    try:
        entry = entry_of(store, run.run_id)
    except LedgerError:
        return None
    candidates = [] if entry is None else [a.name for a in entry.arms if a.role == "candidate"]
    if len(candidates) > 1 and policy.arms.candidate in candidates:
        return f"the run's row is its family's sign-off (candidates {', '.join(candidates)})"
    return None
