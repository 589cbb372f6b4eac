"""The ledger's writes and the accepted builds, in the run's store (``abserve_ledger``,
``abserve_accepted``): a thin shell over the store's engine.

``record_signoff`` is what a sign-off's report calls (``abserve.ledger.signoff``: a re-judgment
under another policy is no sign-off and writes nothing): it sums the sign-off up
(``abserve.ledger.summary``) and writes the run's entry, replacing an earlier one (the sign-off's
report made again is the entry now);
it never fails the report, a write that fails is one warning line. ``accept`` marks a passed
sign-off's candidate build as its config's accepted baseline, keeping the arm as configured so
an arm ``from: accepted`` starts that build again (``abserve.ledger.baseline``);
``latest_accepted`` finds it. Refusals are ``LedgerError`` with one line saying why.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from sqlalchemy import delete, insert, select

from abserve.ledger.entry import AcceptedBuild, ArmBuild, LedgerEntry
from abserve.store.schema import accepted_table, ledger_table

if TYPE_CHECKING:
    from abserve.compare.family import FamilyJudgment
    from abserve.compare.model import Judgment
    from abserve.model.records import RunInfo
    from abserve.store import Store

log = logging.getLogger("abserve.ledger")
MAX_NAME = 256  # abserve_accepted.name


class LedgerError(Exception):
    """A ledger request refused (unknown run, no entry, a run that did not pass); one line."""


def record_entry(store: Store, entry: LedgerEntry) -> None:
    """Write ``entry`` as its run's ledger entry, replacing the run's earlier one."""
    row = {"run_id": entry.run_id, "recorded_at": entry.recorded_at, "config_name": entry.config_name,
           "verdict": entry.verdict, "exit_code": entry.exit_code, "entry": entry.model_dump_json()}
    with store.engine.begin() as conn:
        conn.execute(delete(ledger_table).where(ledger_table.c.run_id == entry.run_id))
        conn.execute(insert(ledger_table), row)


def entry_of(store: Store, run_id: str) -> LedgerEntry | None:
    """The run's ledger entry, or None when no report of it was written."""
    with store.engine.connect() as conn:
        text = conn.execute(select(ledger_table.c.entry).where(ledger_table.c.run_id == run_id)).scalar()
    if text is None:
        return None
    try:
        return LedgerEntry.model_validate_json(text)
    except ValidationError as exc:
        raise LedgerError(f"run {run_id!r}: its ledger entry cannot be read "
                          f"({exc.error_count()} errors; written by another abserve version?)") from None


def record_signoff(database_url: str, judgment: Judgment, report_dir: Path | None,
                   environ: Mapping[str, str] | None = None) -> LedgerEntry | None:
    """Write the ledger entry of a report just written; never raises: a failure is one warning
    line and None (the report stands without its entry)."""
    from abserve.ledger.summary import entry_from_judgment

    return _record(database_url, judgment.run_id, environ,
                   lambda run, env, now: entry_from_judgment(judgment, run, report_dir, env, now))


def record_family_signoff(database_url: str, run_id: str, family: FamilyJudgment, report_dir: Path | None,
                          environ: Mapping[str, str] | None = None) -> LedgerEntry | None:
    """``record_signoff`` of a sign-off with several candidates: the family's entry
    (``abserve.ledger.summary.family_entry``) replaces the one each candidate's report wrote."""
    from abserve.ledger.summary import family_entry

    return _record(database_url, run_id, environ,
                   lambda run, env, now: family_entry(family, run, report_dir, env, now))


def _record(database_url: str, run_id: str, environ: Mapping[str, str] | None,
            make: Callable[[RunInfo, Mapping[str, str], float], LedgerEntry]) -> LedgerEntry | None:
    from abserve.store import Store

    try:
        with Store.open(database_url) as store:
            run = store.get_run(run_id)
            if run is None:
                raise LedgerError(f"no run {run_id!r} in the store")
            entry = make(run, os.environ if environ is None else environ, time.time())
            record_entry(store, entry)
            return entry
    except Exception as exc:  # the report must never fail for its ledger entry
        line = " ".join(str(exc).split())[:300]
        log.warning("ledger: the entry of run %s was not written: %s: %s", run_id, type(exc).__name__, line)
        return None


def accept(store: Store, run_id: str, name: str, now: float, arm: str | None = None) -> AcceptedBuild:
    """Accept run ``run_id``'s candidate build (``arm``: which, when it has several) as release
    ``name`` of its config. Refuses (``LedgerError``) an unknown run, a run with no ledger entry
    (no report yet) and a run whose verdict is not ``pass``."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise LedgerError(f"--as: a release name of 1 to {MAX_NAME} characters, not {name!r}")
    run = store.get_run(run_id)
    if run is None:
        raise LedgerError(f"no run {run_id!r} in the store")
    entry = entry_of(store, run_id)
    if entry is None:
        raise LedgerError(f"run {run_id!r} has no ledger entry (no report of it was written): "
                          f"run `abserve report {run_id} --out DIR` first")
    if entry.verdict != "pass":
        why = f": {entry.reasons[0]}" if entry.reasons else ""
        raise LedgerError(f"run {run_id!r} did not pass: its verdict is {entry.verdict} "
                          f"(exit {entry.exit_code}){why}; only a passed sign-off can be accepted")
    build = _candidate(entry, arm)
    config_name = entry.config_name or run.provenance.experiment
    if not config_name:
        raise LedgerError(f"run {run_id!r} names no config (its provenance has no experiment): "
                          "it cannot be a config's baseline")
    accepted = AcceptedBuild(name=name, config_name=config_name, run_id=run_id, arm=build.name,
                             accepted_at=now, build=build,
                             arm_config=dict(run.provenance.arm_configs.get(build.name, {})))
    with store.engine.begin() as conn:
        conn.execute(insert(accepted_table), {
            "name": name, "config_name": config_name, "run_id": run_id, "accepted_at": now,
            "accepted": accepted.model_dump_json()})
    return accepted


def _candidate(entry: LedgerEntry, arm: str | None) -> ArmBuild:
    candidates = [a for a in entry.arms if a.role == "candidate"]
    if arm is not None:
        found = next((a for a in entry.arms if a.name == arm), None)
        if found is None or found.role != "candidate":
            raise LedgerError(f"run {entry.run_id!r} has no candidate arm {arm!r} "
                              f"(candidates: {', '.join(a.name for a in candidates) or 'none'})")
        return found
    if len(candidates) != 1:
        raise LedgerError(f"run {entry.run_id!r} has {len(candidates)} candidate arms "
                          f"({', '.join(a.name for a in candidates) or 'none'}): name one with --arm")
    return candidates[0]


def latest_accepted(store: Store, config_name: str, name: str | None = None) -> AcceptedBuild | None:
    """The build last accepted for ``config_name`` (as release ``name`` when given), or None."""
    cols = accepted_table.c
    stmt = select(cols.accepted).where(cols.config_name == config_name)
    if name is not None:
        stmt = stmt.where(cols.name == name)
    with store.engine.connect() as conn:
        text = conn.execute(stmt.order_by(cols.accepted_at.desc(), cols.id.desc()).limit(1)).scalar()
    return None if text is None else AcceptedBuild.model_validate_json(text)

