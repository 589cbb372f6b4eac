"""The GuideLLM reader on reports ``guidellm run`` wrote here, as JSON and as YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abserve.saved import guidellm
from abserve.saved.keys import body_key
from abserve.saved.model import SavedRunError


def test_a_real_json_report(fixtures: Path) -> None:
    path = fixtures / "guidellm" / "run1.json"
    report = json.loads(path.read_text())
    bench = report["benchmarks"][0]
    run = guidellm.read(path, "run1.json", is_yaml=False)
    assert run.header.tool == "guidellm"
    assert run.header.model == "tiny-llava"
    assert run.header.started_at == bench["start_time"]
    assert run.header.duration_s == bench["duration"]
    assert run.header.summary["time_to_first_token_ms.mean"] == (
        bench["metrics"]["time_to_first_token_ms"]["successful"]["mean"])
    requests = list(run.requests)
    saved = bench["requests"]["successful"]
    assert len(requests) == len(saved) == 4
    for stats, r in zip(saved, requests, strict=True):
        assert r.ok
        assert r.ttft == pytest.approx(stats["time_to_first_token_ms"] / 1e3)
        assert r.e2e == stats["request_latency"]
        assert r.output_text == stats["output"]
        assert r.prompt_key == body_key(json.loads(stats["request_args"])["body"])
        assert r.itl is None


def test_yaml_and_json_of_one_run_read_the_same(fixtures: Path) -> None:
    as_json = guidellm.read(fixtures / "guidellm" / "run1.json", "j", is_yaml=False)
    as_yaml = guidellm.read(fixtures / "guidellm" / "run1.yaml", "j", is_yaml=True)
    assert as_json.header == as_yaml.header
    assert list(as_json.requests) == list(as_yaml.requests)


def _two_benchmarks(fixtures: Path, tmp_path: Path) -> Path:
    report = json.loads((fixtures / "guidellm" / "run1.json").read_text())
    second = json.loads(json.dumps(report["benchmarks"][0]))
    second["config"]["strategy"]["streams"] = 4
    second["requests"]["successful"] = second["requests"]["successful"][:1]
    report["benchmarks"].append(second)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(report))
    return path


def test_several_benchmarks_need_a_pick(fixtures: Path, tmp_path: Path) -> None:
    path = _two_benchmarks(fixtures, tmp_path)
    with pytest.raises(SavedRunError, match=r"2 benchmarks \(#1 concurrent@2, #2 concurrent@4\); name one"):
        guidellm.read(path, "sweep.json", is_yaml=False)
    assert len(list(guidellm.read(path, "sweep.json", is_yaml=False, pick=1).requests)) == 4
    assert len(list(guidellm.read(path, "sweep.json", is_yaml=False, pick=2).requests)) == 1
    with pytest.raises(SavedRunError, match="no benchmark #3"):
        guidellm.read(path, "sweep.json", is_yaml=False, pick=3)


def test_a_report_without_requests_is_refused(fixtures: Path, tmp_path: Path) -> None:
    report = json.loads((fixtures / "guidellm" / "run1.json").read_text())
    report["benchmarks"][0]["requests"] = {"successful": [], "errored": [], "incomplete": [], "total": None}
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(report))
    with pytest.raises(SavedRunError, match="without per-request data"):
        guidellm.read(path, "empty.json", is_yaml=False)


def test_errored_requests_and_old_prompt_strings(fixtures: Path, tmp_path: Path) -> None:
    report = json.loads((fixtures / "guidellm" / "run1.json").read_text())
    requests = report["benchmarks"][0]["requests"]
    failed = json.loads(json.dumps(requests["successful"][0]))
    failed["info"]["error"] = "HTTP 400"
    del failed["request_args"]
    failed["prompt"] = "an old report's prompt"
    requests["errored"] = [failed]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(report))
    read = list(guidellm.read(path, "mixed.json", is_yaml=False).requests)
    assert [r.ok for r in read] == [True] * 4 + [False]
    assert read[-1].error == "HTTP 400"
    assert read[-1].prompt_key is not None


def test_a_truncated_report_is_refused(fixtures: Path, tmp_path: Path) -> None:
    for name, is_yaml in (("run1.json", False), ("run1.yaml", True)):
        cut = tmp_path / name
        cut.write_bytes((fixtures / "guidellm" / name).read_bytes()[:30_000])
        with pytest.raises(SavedRunError, match=f"{name}: "):
            run = guidellm.read(cut, name, is_yaml=is_yaml)
            list(run.requests)


def test_records_without_the_known_markers_take_the_event_walk(fixtures: Path, tmp_path: Path) -> None:
    report = json.loads((fixtures / "guidellm" / "run1.json").read_text())
    for stats in report["benchmarks"][0]["requests"]["successful"]:
        stats["type_"] = "generative_text_response"  # an older report's records
    path = tmp_path / "older.json"
    path.write_text(json.dumps(report))
    fast = list(guidellm.read(fixtures / "guidellm" / "run1.json", "a", is_yaml=False).requests)
    walked = list(guidellm.read(path, "b", is_yaml=False).requests)
    assert walked == fast
