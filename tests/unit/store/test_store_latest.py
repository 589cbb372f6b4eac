"""``store.latest.latest_run``: the run that started last, with its exchanges, from a real
SQLite store given as a file path or a URL; None for a store without runs."""

from __future__ import annotations

from pathlib import Path

from tests.support.records_factory import arm, exchange, run_info

from abserve.store import Store
from abserve.store.latest import database_url, latest_run


def test_the_newest_run_and_its_exchanges(tmp_path: Path) -> None:
    db = tmp_path / "abserve.db"
    with Store.open(database_url(db)) as store:
        for name, started in (("newer", 2_000.0), ("older", 1_000.0)):
            store.create_run(run_info(run_id=name).model_copy(update={"started_at": started}))
        store.write_exchanges([exchange(i, [arm("a")], run_id="newer") for i in range(3)])
        store.write_exchanges([exchange(9, [arm("a")], run_id="older")])
    stored = latest_run(db)
    assert stored is not None
    assert stored.run.run_id == "newer"
    assert len(stored.exchanges) == 3
    bare = latest_run(database_url(db), exchanges=False)
    assert bare is not None
    assert bare.run.run_id == "newer"
    assert bare.exchanges == []


def test_a_store_without_runs_has_no_latest(tmp_path: Path) -> None:
    assert latest_run(tmp_path / "empty.db") is None
    assert database_url("postgresql://u@h/db") == "postgresql://u@h/db"
