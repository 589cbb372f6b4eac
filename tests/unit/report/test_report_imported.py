"""The report states what traffic files sent and what abserve changed in them
(``report/imported.py``): requests and images per file, lines that asked for sampling and were
sent greedy, lines sampled with the router's seed, invalid lines left out; generated traffic
says nothing of files."""

from __future__ import annotations

from pathlib import Path

from tests.support.records_factory import ab_run, run_info

from abserve.compare import Policy, judge
from abserve.report import write_report
from abserve.report.imported import imported_statements

FILE_ITEM = {"kind": "file", "profile": "file-gateway", "requests": 20,
             "file": {"path": "/data/gateway.jsonl", "greedy": True},
             "imported": {"requests": 20, "images": 36, "forced_greedy": 6, "seeded": 0,
                          "skipped": 2, "skipped_lines": [4, 9]}}


def test_the_report_says_how_many_requests_of_a_file_were_made_greedy(tmp_path: Path) -> None:
    run = run_info()
    run = run.model_copy(update={"provenance": run.provenance.model_copy(update={"load_plan": [
        {"kind": "profile", "profile": "many-items", "requests": 24, "set": {}}, FILE_ITEM]})})
    j = judge(run, ab_run(30), Policy())
    statement = ("file-gateway from /data/gateway.jsonl: 20 requests, 36 images; 6 asked for "
                 "sampling and were changed to greedy (temperature 0, tagged "
                 "sampling=forced-greedy); 2 invalid lines left out (lines 4, 9).")
    assert imported_statements(j) == [statement]
    paths = write_report(j, tmp_path / "out")
    assert f"- **Traffic file:** {statement}" in paths.markdown.read_text()
    assert '<li class="traffic-file"><strong>Traffic file.</strong> file-gateway' in paths.html.read_text()


def test_generated_traffic_says_nothing_of_files() -> None:
    j = judge(run_info(), ab_run(10), Policy())
    assert imported_statements(j) == []


def test_a_mismatch_of_an_imported_request_names_its_line_in_the_file(tmp_path: Path) -> None:
    exchanges = ab_run(30, candidate_tokens={7: [1, 2, 3, 99, 98, 97, 96, 95]})
    exchanges[7].tags["source-line"] = "412"
    j = judge(run_info(), exchanges, Policy())
    paths = write_report(j, tmp_path / "out", exchanges={ex.request_id: ex for ex in exchanges})
    summary = next(line for line in paths.markdown.read_text().splitlines() if "req-00007" in line
                   and "<summary>" in line)
    assert "source-line=412" in summary


def test_a_trace_is_named_with_its_blocks_whether_its_format_was_named_or_detected() -> None:
    trace = {"block_size": 512, "images_per_block": 1}
    for named, read_as in (("mooncake", {"mooncake": 3}), ("auto", {"mooncake": 3}),
                           ("auto", {"openai": 3})):
        item = {"kind": "file", "profile": "trace", "requests": 3,
                "file": {"path": "/data/trace.jsonl", "format": named, "trace": trace},
                "imported": {"requests": 3, "images": 0, "formats": read_as}}
        run = run_info()
        run = run.model_copy(update={"provenance": run.provenance.model_copy(update={"load_plan": [item]})})
        [statement] = imported_statements(judge(run, ab_run(10), Policy()))
        named_trace = "(a Mooncake trace: 512-token hash blocks, 1 images per full block)" in statement
        assert named_trace == ("mooncake" in read_as), statement
