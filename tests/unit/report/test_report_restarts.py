"""The report states the router's restarts during a run (``report/restarts.py``).

The restarts come from a real store: the run is created, finished, reopened with
``Store.resume_run`` (as a restarted router with ``resume`` does) and finished again in
SQLite, then judged and written. The statement appears in the run facts of report.md and
report.html and in report.json's summary; it changes no verdict. A run the router ran
through says nothing about restarts.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.records_factory import ab_run, run_info

from abserve.compare import Judgment, Policy, judge
from abserve.model.records import ROUTER_RESTARTS_KEY, RunInfo
from abserve.report import write_report
from abserve.report.restarts import restart_statement
from abserve.store import Store

AT = "1970-01-01 00:16:40 UTC"  # the restart's time below: Unix 1000


def restarted_run(tmp_path: Path, times: int) -> RunInfo:
    """``run_info()`` stored, then stopped and reopened ``times`` times, then completed."""
    with Store.open(f"sqlite:///{tmp_path / 'abserve.db'}") as store:
        run = run_info()
        store.create_run(run)
        for _ in range(times):
            store.finish_run(run.run_id, "completed")
            store.resume_run(run.run_id, run.config)
        store.finish_run(run.run_id, "completed")
        stored = store.get_run(run.run_id)
    assert stored is not None
    return stored


def pinned(run: RunInfo) -> RunInfo:
    """The same run with its restarts at Unix time 1000 (a fixed time to read back)."""
    restarts = [r.model_copy(update={"at": 1000.0}) for r in run.provenance.router_restarts]
    assert restarts
    provenance = run.provenance.model_copy(update={ROUTER_RESTARTS_KEY: restarts})
    return run.model_copy(update={"provenance": provenance})


def test_the_report_states_a_restart_without_changing_the_verdict(tmp_path: Path) -> None:
    run = pinned(restarted_run(tmp_path, 1))
    j = judge(run, ab_run(60), Policy())
    statement = (f"The router restarted 1 time during the run (at {AT} after a clean stop): "
                 "requests sent while it was down reached neither arm.")
    assert restart_statement(j) == statement
    paths = write_report(j, tmp_path / "out")
    assert f"- **Router restarts:** {statement}" in paths.markdown.read_text()
    html = paths.html.read_text()
    assert '<li id="router-restarts"><strong>Router restarts.</strong> The router restarted 1 time' in html
    summary = json.loads(paths.json.read_text())["summary"]
    assert (summary["router_restarts"], summary["router_restart_statement"]) == (1, statement)
    assert j.verdict == judge(run_info(), ab_run(60), Policy()).verdict == "pass"
    assert j.invalid_reasons == []


def test_several_restarts_and_an_interruption_are_counted_and_named(tmp_path: Path) -> None:
    run = pinned(restarted_run(tmp_path, 7))
    restarts = run.provenance.router_restarts
    restarts[0].previous_status = "interrupted"  # killed once: in-flight exchanges lost
    text = restart_statement(judge(run, ab_run(20), Policy()))
    assert text is not None
    assert text.startswith(f"The router restarted 7 times during the run (at {AT} after an "
                           f"interruption; {AT} after a clean stop;")
    assert text.count(AT) == 5
    assert "; and 2 more): requests sent while it was down reached neither arm." in text
    assert "exchanges still in flight" in text


def test_a_run_without_restarts_says_nothing_of_them(tmp_path: Path) -> None:
    run = restarted_run(tmp_path, 0)
    assert ROUTER_RESTARTS_KEY not in run.provenance.model_dump()
    j: Judgment = judge(run, ab_run(60), Policy())
    assert restart_statement(j) is None
    paths = write_report(j, tmp_path / "out")
    assert "Router restarts" not in paths.markdown.read_text()
    assert "router-restarts" not in paths.html.read_text()
    summary = json.loads(paths.json.read_text())["summary"]
    assert (summary["router_restarts"], summary["router_restart_statement"]) == (0, None)
