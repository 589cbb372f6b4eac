"""``abserve ledger``'s reader over real SQLite stores: every run with its entry or marked, the
accepted builds, every store found under a runs folder, and one clear error for a store it
cannot read (``abserve.ledger.site_data``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import insert, update
from tests.support import ledger_site as ls

from abserve.ledger.site_data import LedgerReadError, SiteData, read_site, read_store, stores_under
from abserve.store import Store
from abserve.store.schema import accepted_table, meta_table


def url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def marked_store(tmp_path: Path) -> str:
    """Two sign-offs, one accepted, and every kind of run the ledger must mark."""
    db = url(tmp_path / "abserve.db")
    with Store.open(db) as st:
        ls.add_signoff(st, ls.entry("ok-1", t=ls.T0))
        ok2 = ls.entry("ok-2", t=ls.T0 + 10)
        ls.add_signoff(st, ok2)
        ls.add_accepted(st, ok2, "v1", ls.T0 + 11)
        ls.add_run(st, "half", ls.T0 + 20, "half-written", experiment="cpu-default")
        ls.add_run(st, "live", ls.T0 + 30, "running", experiment="cpu-default")
        ls.add_run(st, "bare", ls.T0 + 40, experiment="other")
        ls.add_run(st, "newer", ls.T0 + 50)
        ls.add_entry_row(st, ls.entry("newer", t=ls.T0 + 50, verdict="fail"),
                         text='{"schema_version": 99, "run_id": "newer", "report_dir": "/r/newer"}')
        ls.add_run(st, "torn", ls.T0 + 60)
        ls.add_entry_row(st, ls.entry("torn", t=ls.T0 + 60), text='{"schema_version": 1, "run_')
        with st.engine.begin() as conn:  # an accepted build a newer abserve wrote
            conn.execute(insert(accepted_table), {"name": "x", "config_name": "c", "run_id": "r",
                                                  "accepted_at": 1.0, "accepted": '{"name": 1}'})
    return db


def test_every_run_newest_first_with_its_entry_or_marked(marked_store: str) -> None:
    data = read_site(marked_store, Path("nowhere"))
    got = {s.run_id: (s.mark, s.config_name, s.verdict) for s in data.signoffs}
    assert [s.run_id for s in data.signoffs] == ["torn", "newer", "bare", "live", "half", "ok-2", "ok-1"]
    assert got == {
        "torn": ("unreadable ledger entry", "cpu-default", "pass"),
        "newer": ("written by a newer abserve (ledger entry version 99)", "cpu-default", "fail"),
        "bare": ("no report", "other", None),
        "live": ("running", "cpu-default", None),
        "half": ("interrupted before its report", "cpu-default", None),
        "ok-2": (None, "cpu-default", "pass"),
        "ok-1": (None, "cpu-default", "pass"),
    }
    assert all((s.entry is None) == (s.mark is not None) for s in data.signoffs)
    folders = {s.run_id: s.report_dir for s in data.signoffs if s.report_dir}
    assert folders == {"newer": "/r/newer"}  # a newer entry's report is still linked
    assert [(a.name, a.run_id) for a in data.accepted] == [("v1", "ok-2")]
    assert data.notes == [f"{marked_store}: 1 accepted build(s) written by a newer abserve left out"]
    assert data.stores == [marked_store]


def test_stores_under_a_runs_folder_are_gathered_once_each(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for folder, run_ids in (("a", ["a-1", "shared"]), ("b/deep", ["b-1", "shared"])):
        with Store.open(url(runs / folder / "abserve.db")) as st:
            for i, rid in enumerate(run_ids):
                ls.add_signoff(st, ls.entry(rid, t=ls.T0 + i))
    other = runs / "c" / "notes.db"
    other.parent.mkdir()
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    (runs / "junk.db").write_bytes(b"not sqlite at all")
    before = other.read_bytes()
    found = [p.relative_to(runs).as_posix() for p in stores_under(runs)]
    assert found == ["a/abserve.db", "b/deep/abserve.db"]
    data = read_site(None, runs)
    assert sorted(s.run_id for s in data.signoffs) == ["a-1", "b-1", "shared"]
    assert len(data.stores) == 2
    assert other.read_bytes() == before


def test_a_store_under_runs_that_cannot_be_read_is_a_note(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with Store.open(url(runs / "ok" / "abserve.db")) as st:
        ls.add_signoff(st, ls.entry("r1"))
    newer = runs / "newer" / "abserve.db"
    with Store.open(url(newer)) as st, st.engine.begin() as conn:
        conn.execute(update(meta_table).where(meta_table.c.key == "schema_version").values(value="99"))
    data = read_site(None, runs)
    assert [s.run_id for s in data.signoffs] == ["r1"]
    assert len(data.notes) == 1
    assert "schema version '99'" in data.notes[0]


@pytest.mark.parametrize(("db", "runs", "says"), [
    (None, "missing", "no runs folder at"),
    (None, "empty", "no abserve store under"),
    ("sqlite:///{tmp}/none.db", "x", "no store at"),
    ("mysql://u@h/db", "x", "unsupported database_url scheme"),
    ("not a url", "x", "not a database URL"),
])
def test_a_store_that_cannot_be_read_is_one_clear_error(tmp_path: Path, db: str | None, runs: str,
                                                         says: str) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(LedgerReadError, match=says) as err:
        read_site(db.format(tmp=tmp_path) if db else None, tmp_path / runs)
    assert "\n" not in str(err.value)


def test_an_older_store_without_ledger_tables_is_read_with_every_run_marked(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with Store.open(url(db)) as st:
        ls.add_run(st, "old-run", ls.T0, experiment="cpu-default")
    with sqlite3.connect(db) as conn:  # as a store from before the ledger: no ledger tables
        conn.execute("DROP TABLE abserve_ledger")
        conn.execute("DROP TABLE abserve_accepted")
    data = SiteData()
    read_store(url(db), data)
    assert [(s.run_id, s.mark) for s in data.signoffs] == [("old-run", "no report")]


@pytest.mark.postgres
def test_a_postgresql_store_reads_alike(pg_url: str, tmp_path: Path) -> None:
    with Store.open(pg_url) as st:
        made = ls.release_stream(st, tmp_path, n=3)
        ls.add_run(st, "half", ls.T0 + 1e5, "half-written", experiment="cpu-default")
    data = read_site(pg_url, tmp_path / "runs")
    assert [s.run_id for s in data.signoffs] == ["half", *(e.run_id for e in reversed(made))]
    assert data.signoffs[0].mark == "interrupted before its report"
    assert data.signoffs[1].entry == made[-1]
    assert [a.run_id for a in data.accepted] == [made[2].run_id]
