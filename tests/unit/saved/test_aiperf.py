"""The AIPerf reader on exports ``aiperf profile`` wrote here (records, summary, inputs, outputs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from abserve.saved import aiperf
from abserve.saved.keys import body_key
from abserve.saved.lookahead import Lookahead
from abserve.saved.model import SavedRunError


def _copy(fixtures: Path, tmp_path: Path, run: str = "run1") -> Path:
    folder = tmp_path / run
    shutil.copytree(fixtures / "aiperf" / run, folder)
    return folder


def test_a_real_export_with_its_summary_prompts_and_outputs(fixtures: Path) -> None:
    folder = fixtures / "aiperf" / "run1"
    run = aiperf.read(folder / "profile_export.jsonl", "run1")
    summary = json.loads((folder / "profile_export_aiperf.json").read_text())
    assert run.header.tool == "aiperf"
    assert run.header.model == "tiny-llava"
    assert run.header.duration_s == pytest.approx(summary["benchmark_duration"]["avg"])
    assert run.header.summary["time_to_first_token.avg"] == summary["time_to_first_token"]["avg"]
    lines = [json.loads(line) for line in (folder / "profile_export.jsonl").read_text().splitlines()]
    inputs = json.loads((folder / "inputs.json").read_text())["data"]
    outputs = json.loads((folder / "outputs.json").read_text())["data"]
    bodies = {s["session_id"]: s["payloads"][0] for s in inputs}
    texts = {o["conversation_id"]: o["response_text"] for o in outputs}
    requests = list(run.requests)
    assert len(requests) == len(lines) == 12
    for line, r in zip(lines, requests, strict=True):
        conversation = line["metadata"]["conversation_id"]
        metrics = line["metrics"]
        assert r.ok
        assert r.ttft == pytest.approx(metrics["time_to_first_token"]["value"] / 1e3)
        assert r.e2e == pytest.approx(metrics["request_latency"]["value"] / 1e3)
        assert r.output_tokens == metrics["usage_completion_tokens"]["value"]
        assert r.prompt_key == body_key(bodies[conversation])
        assert r.output_text == texts[conversation]
    assert len({r.prompt_key for r in requests}) == 12


def test_two_runs_of_one_seed_share_their_prompt_keys(fixtures: Path) -> None:
    runs = [aiperf.read(fixtures / "aiperf" / n / "profile_export.jsonl", n) for n in ("run1", "run2")]
    keys = [{r.prompt_key for r in run.requests} for run in runs]
    assert keys[0] == keys[1]


def test_failed_requests(fixtures: Path) -> None:
    requests = list(aiperf.read(fixtures / "aiperf" / "errors" / "profile_export.jsonl", "errors").requests)
    failed = [r for r in requests if not r.ok]
    assert len(requests) == 6
    assert len(failed) == 2
    assert all("maximum context length" in (r.error or "") and r.prompt_key for r in failed)


def test_without_the_side_files_prompts_and_outputs_are_none(fixtures: Path, tmp_path: Path) -> None:
    folder = _copy(fixtures, tmp_path)
    for name in ("inputs.json", "outputs.json", "profile_export_aiperf.json"):
        (folder / name).unlink()
    run = aiperf.read(folder / "profile_export.jsonl", "bare")
    assert run.header.model is None
    requests = list(run.requests)
    assert len(requests) == 12
    assert all(r.prompt_key is None and r.output_text is None and r.ttft for r in requests)


def test_a_cut_last_line_is_refused(fixtures: Path, tmp_path: Path) -> None:
    folder = _copy(fixtures, tmp_path)
    export = folder / "profile_export.jsonl"
    export.write_bytes(export.read_bytes()[:-200])
    with pytest.raises(SavedRunError, match="cut: its last line is not complete JSON"):
        aiperf.read(export, "cut")


def test_a_foreign_line_is_refused(fixtures: Path, tmp_path: Path) -> None:
    folder = _copy(fixtures, tmp_path)
    export = folder / "profile_export.jsonl"
    lines = export.read_text().splitlines()
    export.write_text("\n".join([*lines[:3], '{"hello": 1}', *lines[3:]]) + "\n")
    with pytest.raises(SavedRunError, match="odd: line 4 is not an AIPerf per-request record"):
        list(aiperf.read(export, "odd").requests)


def test_warmup_records_are_skipped(fixtures: Path, tmp_path: Path) -> None:
    folder = _copy(fixtures, tmp_path)
    export = folder / "profile_export.jsonl"
    docs = [json.loads(line) for line in export.read_text().splitlines()]
    docs[0]["metadata"]["benchmark_phase"] = "warmup"
    export.write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert len(list(aiperf.read(export, "w").requests)) == 11


def test_lookahead_holds_only_what_came_out_of_order() -> None:
    joined = Lookahead(iter([(i, str(i)) for i in range(10)]))
    assert joined.take(2) == "2"
    assert joined.held == 2
    assert [joined.take(k) for k in (0, 1, 3)] == ["0", "1", "3"]
    assert joined.held == 0
    assert joined.take(99) is None
    assert joined.held == 6
