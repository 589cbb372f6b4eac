"""``abserve.ledger.book`` over a real store (SQLite, and PostgreSQL marked ``postgres``): every
report writes its run's entry (a report made again replaces it), a passed sign-off is accepted,
anything else refused, and a store written before the ledger's tables existed gains them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from tests.support.records_factory import provenance, run_info
from tests.unit.compare.test_family import POLICY as FAMILY_POLICY
from tests.unit.compare.test_family import three_candidates
from tests.unit.ledger.conftest import POLICY

from abserve.compare import load_policy
from abserve.compare.family import judge_family
from abserve.ledger.book import (
    LedgerError,
    accept,
    entry_of,
    latest_accepted,
    record_entry,
    record_family_signoff,
    record_signoff,
)
from abserve.ledger.signoff import build_report
from abserve.report.judging import judge_run
from abserve.store import Store
from abserve.store.schema import ledger_table


def report_all(url: str, out: Path) -> None:
    for run_id in ("good", "slow"):
        build_report(url, run_id, out / run_id, POLICY)


def test_every_report_writes_its_runs_entry_and_replaces_it(signoffs: str, tmp_path: Path) -> None:
    report_all(signoffs, tmp_path)
    with Store.open(signoffs) as store:
        good, slow = entry_of(store, "good"), entry_of(store, "slow")
        assert good is not None
        assert slow is not None
        assert (good.verdict, good.exit_code, slow.verdict, slow.exit_code) == ("pass", 0, "fail", 1)
        assert good.report_dir == str((tmp_path / "good").resolve())
        record_entry(store, good.model_copy(update={"verdict": "marginal", "recorded_at": 1.0}))
        with store.engine.connect() as conn:
            rows = conn.execute(select(func.count()).select_from(ledger_table)).scalar_one()
            verdict = conn.execute(select(ledger_table.c.verdict)
                                   .where(ledger_table.c.run_id == "good")).scalar()
        assert (rows, verdict) == (2, "marginal")
        assert entry_of(store, "nope") is None
    build_report(signoffs, "good", tmp_path / "again", POLICY)  # the report made again: its entry now
    with Store.open(signoffs) as store:
        again = entry_of(store, "good")
    assert again is not None
    assert (again.verdict, again.report_dir) == ("pass", str((tmp_path / "again").resolve()))


def test_accept_a_passed_sign_off_and_find_it(signoffs: str, tmp_path: Path) -> None:
    report_all(signoffs, tmp_path)
    with Store.open(signoffs) as store:
        first = accept(store, "good", "v1", now=100.0)
        assert (first.config_name, first.run_id, first.arm, first.name) == ("nightly", "good", "b", "v1")
        assert first.build.git_sha == "ab12" * 10
        assert first.arm_config["venv"] == "/opt/venvs/next"
        assert first.arm_config["args"] == {"--max-num-seqs": 8}
        accept(store, "good", "v2", now=200.0)
        latest = latest_accepted(store, "nightly")
        named = latest_accepted(store, "nightly", "v1")
        assert latest is not None
        assert named is not None
        assert (latest.name, named.name, named.accepted_at) == ("v2", "v1", 100.0)
        assert latest_accepted(store, "nightly", "v3") is None
        assert latest_accepted(store, "other-config") is None


def test_accept_refuses_what_did_not_pass_is_unknown_or_unreported(signoffs: str, tmp_path: Path) -> None:
    report_all(signoffs, tmp_path)
    with Store.open(signoffs) as store:
        store.create_run(run_info(run_id="unreported"))
        with pytest.raises(LedgerError, match=r"did not pass: its verdict is fail \(exit 1\): "):
            accept(store, "slow", "v1", now=1.0)
        with pytest.raises(LedgerError, match="no run 'ghost' in the store"):
            accept(store, "ghost", "v1", now=1.0)
        with pytest.raises(LedgerError, match=r"no ledger entry .*`abserve report unreported --out DIR`"):
            accept(store, "unreported", "v1", now=1.0)
        with pytest.raises(LedgerError, match="no candidate arm 'a'"):
            accept(store, "good", "v1", now=1.0, arm="a")
        with pytest.raises(LedgerError, match="a release name of 1 to 256"):
            accept(store, "good", "  ", now=1.0)
        assert latest_accepted(store, "nightly") is None


def test_an_older_store_is_migrated_not_refused(backend_url: str, tmp_path: Path) -> None:
    """A store written before the ledger's tables existed opens, gains them, keeps its runs."""
    with Store.open(backend_url) as store:
        store.create_run(run_info(run_id="old"))
        with store.engine.begin() as conn:
            conn.execute(text("DROP TABLE abserve_accepted"))
            conn.execute(text("DROP TABLE abserve_ledger"))
    with Store.open(backend_url) as store:
        assert [r.run_id for r in store.list_runs()] == ["old"]
        assert entry_of(store, "old") is None
        assert latest_accepted(store, "nightly") is None


def test_a_ledger_write_that_fails_is_one_warning_never_an_error(
        signoffs: str, caplog: pytest.LogCaptureFixture) -> None:
    with Store.open(signoffs) as store:
        judgment = judge_run(store, "good", load_policy(POLICY))
    ghost = judgment.model_copy(update={"run_id": "ghost"})
    with caplog.at_level(logging.WARNING, logger="abserve.ledger"):
        assert record_signoff(signoffs, ghost, None) is None
        assert record_signoff("nosuch://x", judgment, None) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("ledger: the entry of run ghost was not written: LedgerError: no run")
    assert all("\n" not in line for line in lines)


def test_a_family_sign_off_is_accepted_one_named_candidate_at_a_time(backend_url: str) -> None:
    run = run_info({name: provenance("linear") for name in ("a", "b", "c", "h")}, run_id="fam")
    run.provenance.experiment = "three"
    family = judge_family(run, three_candidates(), FAMILY_POLICY, "a", ["b", "c", "h"], None)
    passed = family.model_copy(update={"verdict": "pass", "exit_code": 0})
    with Store.open(backend_url) as store:
        store.create_run(run)
    entry = record_family_signoff(backend_url, "fam", passed, None)
    assert entry is not None
    with Store.open(backend_url) as store:
        assert entry_of(store, "fam") == entry
        with pytest.raises(LedgerError, match=r"3 candidate arms \(b, c, h\): name one with --arm"):
            accept(store, "fam", "v1", now=1.0)
        assert accept(store, "fam", "v1", now=1.0, arm="h").arm == "h"
