"""The load's own records against the store (issue 52): answers the clients received in full
that the store lacks make the run invalid, with the count; a run without load records is
judged as before and its report says the count was not available.

Real parts: a real SQLite store with the run and its exchanges, real ``timings-*.jsonl``
files as the load writes them (``TimingWriter``), the real judgment and report writer.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.records_factory import ab_run, run_info

from abserve.compare import Policy, judge
from abserve.model.records import RunInfo
from abserve.report import write_report
from abserve.runs.load_seen import count_seen, record_load_seen
from abserve.store import Store
from abserve.store.request_ids import stored_request_ids
from abserve.traffic.timing import TimingRecord, TimingWriter


def timing(request_id: str | None, *, run_id: str = "run-1", error: str | None = None,
           status: int = 200) -> TimingRecord:
    return TimingRecord(run_id=run_id, corpus_index=0, profile="chat", router_request_id=request_id,
                        status=status, error=error, sent_at=1000.0)


def stored_run(tmp_path: Path, n: int) -> tuple[str, list[str]]:
    """A completed run with ``n`` stored exchanges; the store's URL and their request ids."""
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    exchanges = ab_run(n)
    with Store.open(url) as store:
        store.create_run(run_info())
        store.write_exchanges(exchanges)
        store.finish_run("run-1", "completed")
    return url, [e.request_id for e in exchanges]


def write_timings(path: Path, records: list[TimingRecord]) -> None:
    writer = TimingWriter(path)
    for record in records:
        writer.write(record)
    writer.close()


def stored(url: str) -> RunInfo:
    with Store.open(url) as store:
        run = store.get_run("run-1")
    assert run is not None
    return run


def test_count_seen_counts_only_this_runs_whole_answers() -> None:
    records = [timing("a"), timing("b"), timing("b"), timing("c"), timing("d", error="truncated"),
               timing("e", status=503, error="http_status"), timing("f", run_id="other"),
               timing(None)]
    seen = count_seen(records, "run-1", lambda ids: {"a"} & set(ids))
    assert (seen.seen, seen.stored, seen.missing, seen.without_id) == (3, 1, 2, 1)
    assert seen.first_missing == ["b", "c"]


def test_stored_request_ids_finds_only_the_runs_own(tmp_path: Path) -> None:
    url, ids = stored_run(tmp_path, 1200)  # more than one chunk of ids
    with Store.open(url) as store:
        assert stored_request_ids(store, "run-1", [*ids, "nope"]) == set(ids)
        assert stored_request_ids(store, "run-2", ids) == set()


def test_answers_the_store_lacks_make_the_run_invalid(tmp_path: Path) -> None:
    url, ids = stored_run(tmp_path, 60)
    load = tmp_path / "load"
    write_timings(load / "block-0" / "chat" / "timings-0.jsonl",
                  [timing(i) for i in ids[:40]] + [timing("lost-1"), timing("lost-2")])
    write_timings(load / "warmup" / "timings-1.jsonl", [timing(i) for i in ids[40:]])
    with (load / "warmup" / "timings-1.jsonl").open("ab") as fh:
        fh.write(b'{"run_id": "run-1", "corpus')  # a line cut short by a killed process
    seen = record_load_seen(url, "run-1", load)
    assert seen is not None
    assert (seen.seen, seen.stored, seen.missing) == (62, 60, 2)
    run = stored(url)
    assert run.provenance.load_seen == seen
    j = judge(run, ab_run(60), Policy())
    assert (j.verdict, j.exit_code) == ("invalid", 3)
    assert "2 answers the load received are not in the store (60 of 62 stored)" in j.invalid_reasons
    paths = write_report(j, tmp_path / "out")
    md = paths.markdown.read_text()
    assert ("- **Answers missing from the store:** 2 of the 62 answers the clients received in full "
            "are not in the store (60 stored); first missing request ids: lost-1, lost-2.") in md
    assert '<li id="load-seen" class="o-invalid">' in paths.html.read_text()
    assert json.loads(paths.json.read_text())["summary"]["load_seen"]["missing"] == 2


def test_every_answer_stored_is_a_line_of_the_run_facts(tmp_path: Path) -> None:
    url, ids = stored_run(tmp_path, 60)
    write_timings(tmp_path / "load" / "timings-0.jsonl", [timing(i) for i in ids])
    record_load_seen(url, "run-1", tmp_path / "load")
    j = judge(stored(url), ab_run(60), Policy())
    assert j.verdict == "pass"
    md = write_report(j, tmp_path / "out").markdown.read_text()
    assert "- **Answers stored:** All 60 answers the clients received in full are in the store." in md


def test_without_load_records_the_count_is_not_available_never_invalid(tmp_path: Path) -> None:
    url, _ = stored_run(tmp_path, 60)
    assert record_load_seen(url, "run-1", tmp_path / "load") is None  # no load folder: by hand
    run = stored(url)
    assert run.provenance.load_seen is None
    assert "load_seen" not in run.provenance.model_dump()  # the stored JSON does not grow
    j = judge(run, ab_run(60), Policy())
    assert j.verdict == "pass"
    md = write_report(j, tmp_path / "out").markdown.read_text()
    assert "- **Answers stored:** Not available: the run left no load records to count" in md
