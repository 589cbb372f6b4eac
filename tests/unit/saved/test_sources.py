"""``open_saved`` chooses the reader from the content, never the name, and refuses in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from abserve.saved import SavedRunError, open_saved

CASES = [
    ("vllm-bench/run1.json", "vllm-bench", 12),
    ("aiperf/run1/profile_export.jsonl", "aiperf", 12),
    ("aiperf/run1/profile_export_aiperf.json", "aiperf", 12),
    ("aiperf/run1", "aiperf", 12),
    ("guidellm/run1.json", "guidellm", 4),
    ("guidellm/run1.yaml", "guidellm", 4),
    ("guidellm/run1.json#1", "guidellm", 4),
]


@pytest.mark.parametrize(("name", "tool", "count"), CASES)
def test_each_tool_is_recognised(fixtures: Path, name: str, tool: str, count: int) -> None:
    run = open_saved(str(fixtures / name))
    assert run.header.tool == tool
    assert run.header.model == "tiny-llava"
    assert sum(1 for _ in run.requests) == count


def test_names_do_not_matter(fixtures: Path, tmp_path: Path) -> None:
    for name, tool in (("vllm-bench/run1.json", "vllm-bench"), ("guidellm/run1.yaml", "guidellm"),
                       ("guidellm/run1.json", "guidellm")):
        renamed = tmp_path / f"{tool}-renamed.txt"
        shutil.copy(fixtures / name, renamed)
        assert open_saved(str(renamed)).header.tool == tool


@pytest.mark.parametrize(("content", "why"), [
    (b"", "an empty file"),
    (b"hello world\n", "not a result file abserve reads"),
    (b'{"a": 1}', "a JSON file but not a result abserve reads"),
    (b"- 1\n- 2\n", "not a result file abserve reads"),
])
def test_unknown_files_are_refused_naming_the_file(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "mystery.json"
    path.write_bytes(content)
    with pytest.raises(SavedRunError, match=f"^{path}: {why}") as caught:
        open_saved(str(path))
    assert "\n" not in str(caught.value)


def test_refusals(fixtures: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_bytes((fixtures / "vllm-bench" / "run1.json").read_bytes()[:2000])
    raw = tmp_path / "profile_export_raw.jsonl"
    raw.write_text('{"metadata": {"session_num": 0}, "payload": {}, "responses": []}\n')
    lonely = tmp_path / "profile_export_aiperf.json"
    shutil.copy(fixtures / "aiperf" / "run1" / "profile_export_aiperf.json", lonely)
    expected = {
        str(cut): "truncated",
        str(fixtures / "vllm-bench" / "not-detailed.json"): "without per-request data",
        str(raw): "an AIPerf raw export",
        str(lonely): "an AIPerf summary without its per-request export",
        str(tmp_path): "a directory holding none of profile_export.jsonl, benchmarks.json",
        str(tmp_path / "missing.json"): "no such file, and not RUN_ID:ARM",
        str(fixtures / "vllm-bench" / "run1.json") + "#1": "#N picks a benchmark of a GuideLLM report",
    }
    for source, why in expected.items():
        with pytest.raises(SavedRunError, match=why) as caught:
            open_saved(source)
        assert str(caught.value).startswith(source + ": ")


def test_guidellms_default_output_folder(fixtures: Path, tmp_path: Path) -> None:
    shutil.copy(fixtures / "guidellm" / "run1.json", tmp_path / "benchmarks.json")
    assert open_saved(str(tmp_path)).header.tool == "guidellm"
    shutil.copy(fixtures / "guidellm" / "run1.yaml", tmp_path / "benchmarks.yaml")
    with pytest.raises(SavedRunError, match="a directory holding several of"):
        open_saved(str(tmp_path))


def test_run_id_arm_without_a_store(tmp_path: Path) -> None:
    with pytest.raises(SavedRunError, match=r"^run-9:a: no store under .* holds run 'run-9'"):
        (tmp_path / "runs").mkdir()
        open_saved("run-9:a", None, runs=tmp_path / "runs")
