"""The report service waits in the store until the router has finished the run.

Real SQLite: a run created by this process (a live owner, so ``running``) is finished from
another thread a moment later; an unknown run is an error; a run still running at the
deadline is reported as such.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from abserve.deploy.wait_run import main, wait_for_run
from abserve.records import RunInfo
from abserve.store import Store


def _running(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'abserve.db'}"
    store = Store.open(db)
    store.create_run(RunInfo(run_id="r1", started_at=time.time()))
    store.close()
    return db


def test_waits_until_the_router_finishes_the_run(tmp_path: Path) -> None:
    db = _running(tmp_path)

    def finish() -> None:
        time.sleep(1.5)
        store = Store.open(db)
        store.finish_run("r1", "completed")
        store.close()

    thread = threading.Thread(target=finish)
    started = time.monotonic()
    thread.start()
    assert wait_for_run(db, "r1", timeout_s=30) == "completed"
    thread.join()
    assert time.monotonic() - started >= 1.4


def test_a_run_still_written_at_the_deadline_and_an_unknown_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _running(tmp_path)
    assert wait_for_run(db, "r1", timeout_s=0.5) is None
    assert main(["r1", "--db", db, "--timeout-s", "0.5"]) == 1
    assert "still running" in capsys.readouterr().err
    assert main(["nope", "--db", db, "--timeout-s", "0.5"]) == 4
    assert "no run 'nope'" in capsys.readouterr().err
