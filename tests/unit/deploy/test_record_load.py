"""A compose load that ended early voids its run, and the report says why.

``abserve.deploy.record_load`` reads the run folder docker/run-load.sh leaves (its exit code,
one summary per Locust process and profile), stores it in a real SQLite run's provenance, and
``abserve.compare.verdict.invalid_reasons`` turns it into the run's invalid reasons.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from abserve.compare.policy import Policy
from abserve.compare.verdict import invalid_reasons, load_reasons
from abserve.deploy.record_load import load_outcome, main
from abserve.records import RunInfo
from abserve.store import Store


def _load_dir(tmp_path: Path, exit_code: str | None, **worker: object) -> Path:
    load = tmp_path / "load"
    profile = load / "many-items"
    profile.mkdir(parents=True)
    if exit_code is not None:
        (load / "exit_code").write_text(exit_code + "\n")
    master_reason = worker.pop("master_reason", "completed")
    (profile / "node-master-7.json").write_text(json.dumps(
        {"node": "master", "stop_reason": master_reason, "done_shards": [0]}))
    counts = {"planned": 40, "sent": 40, "failures": 0} | worker
    (profile / "node-worker-0-9.json").write_text(json.dumps(
        {"node": "worker-0", "stop_reason": None, "shard": 0, "shards": 2, **counts}))
    (profile / "node-worker-1-10.json").write_text("{not json")  # a torn file is skipped
    return load


def test_a_lost_worker_is_an_invalid_run_that_names_the_profile(tmp_path: Path) -> None:
    outcome = load_outcome(_load_dir(tmp_path, "4", sent=12, master_reason="worker_lost"))
    assert outcome == {"exit_code": 4, "profiles": [{"profile": "many-items", "stop_reason": "worker_lost",
                                                     "planned": 40, "sent": 12, "failures": 0}]}
    [reason] = load_reasons(outcome, 0.02)
    assert "stopped early: exit 4, a Locust worker was lost" in reason
    assert "'many-items' (worker_lost, 12 of 40 requests sent)" in reason


def test_a_lost_worker_that_left_no_summary_is_named_without_counts(tmp_path: Path) -> None:
    load = _load_dir(tmp_path, "4", master_reason="worker_lost")
    for worker in load.glob("*/node-worker-*.json"):
        worker.unlink()  # SIGKILLed: it wrote nothing
    [reason] = load_reasons(load_outcome(load), 0.02)
    assert reason.endswith("in profile 'many-items' (worker_lost)")


def test_a_clean_load_gives_no_reason_and_failures_at_the_client_do(tmp_path: Path) -> None:
    assert load_reasons(load_outcome(_load_dir(tmp_path / "ok", "0", failures=0)), 0.02) == []
    assert load_reasons(load_outcome(_load_dir(tmp_path / "few", "0", failures=1)), 0.05) == []  # 2.5%
    [reason] = load_reasons(load_outcome(_load_dir(tmp_path / "many", "0", failures=4)), 0.02)
    assert "client saw 4/40 requests fail (10.0%), above 2.0%" in reason


def test_a_profile_cut_by_its_deadline_is_named_although_the_exit_was_0(tmp_path: Path) -> None:
    outcome = load_outcome(_load_dir(tmp_path, "0", sent=25, master_reason="stopped"))
    assert load_reasons(outcome, 0.02) == [
        "the load's profile 'many-items' stopped before its end (stopped, 25 of 40 requests sent)"]


def test_a_load_that_wrote_no_end_did_not_finish(tmp_path: Path) -> None:
    outcome = load_outcome(_load_dir(tmp_path, None))
    assert outcome["exit_code"] is None
    assert load_reasons(outcome, 0.02) == ["the load recorded no end (no load/exit_code): it did not finish"]
    assert load_outcome(tmp_path / "missing") == {"exit_code": None, "profiles": []}


@pytest.mark.parametrize(("code", "words"), [("3", "error rate passed"), ("2", "setup failed"),
                                             ("1", "Locust failed")])
def test_each_early_end_is_named(tmp_path: Path, code: str, words: str) -> None:
    [reason] = load_reasons(load_outcome(_load_dir(tmp_path, code, master_reason="error_rate")), 0.02)
    assert words in reason


def test_recorded_in_the_store_the_run_is_judged_invalid(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'abserve.db'}"
    store = Store.open(db)
    store.create_run(RunInfo(run_id="r1", status="completed", started_at=time.time()))
    store.close()
    load = _load_dir(tmp_path, "4", sent=12, master_reason="worker_lost")
    assert main(["r1", "--db", db, "--load-dir", str(load)]) == 0
    store = Store.open(db)
    run = store.get_run("r1")
    store.close()
    assert run is not None
    assert run.provenance.load is not None
    assert run.provenance.load["exit_code"] == 4
    reasons = invalid_reasons(run, [], Policy(), {})
    assert any("a Locust worker was lost" in r for r in reasons), reasons


def test_an_unknown_run_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'abserve.db'}"
    Store.open(db).close()
    assert main(["nope", "--db", db, "--load-dir", str(tmp_path)]) == 4
    assert "no run 'nope'" in capsys.readouterr().err
