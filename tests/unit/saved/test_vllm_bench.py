"""The vllm-bench reader on files ``vllm bench serve --save-detailed`` wrote here, and on
generated files whose columns are streamed (the path a 100,000-request file takes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abserve.saved import jsonscan, vllm_bench
from abserve.saved.model import SavedRunError


def _read(path: Path) -> tuple[Any, list[Any]]:
    run = vllm_bench.read(path, str(path))
    return run.header, list(run.requests)


def test_a_real_detailed_file(fixtures: Path) -> None:
    path = fixtures / "vllm-bench" / "run1.json"
    doc = json.loads(path.read_text())
    header, requests = _read(path)
    assert header.tool == "vllm-bench"
    assert header.model == "tiny-llava"
    assert header.duration_s == doc["duration"]
    assert header.summary["mean_ttft_ms"] == doc["mean_ttft_ms"]
    assert header.started_at is not None
    assert len(requests) == doc["num_prompts"] == 12
    for i, r in enumerate(requests):
        assert r.ok
        assert r.ttft == doc["ttfts"][i]
        assert r.itl == tuple(doc["itls"][i])
        assert r.e2e == doc["latencies"][i]
        assert r.output_text == doc["generated_texts"][i]
        assert (r.input_tokens, r.output_tokens) == (doc["input_lens"][i], doc["output_lens"][i])
        assert r.tpot == pytest.approx((r.e2e - r.ttft) / (r.output_tokens - 1))
        assert r.prompt_key is None  # vLLM's benchmark saves no prompts


def test_failed_requests_carry_their_error(fixtures: Path) -> None:
    _, requests = _read(fixtures / "vllm-bench" / "errors.json")
    failed = [r for r in requests if not r.ok]
    assert len(requests) == 6
    assert len(failed) == 4
    assert all(r.error and r.ttft is None and r.e2e is None for r in failed)


def test_a_file_saved_without_detail_is_refused(fixtures: Path) -> None:
    with pytest.raises(SavedRunError, match=r"not-detailed.json: .*--save-detailed"):
        _read(fixtures / "vllm-bench" / "not-detailed.json")


def test_a_truncated_file_is_refused(fixtures: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_bytes((fixtures / "vllm-bench" / "run1.json").read_bytes()[:3000])
    with pytest.raises(SavedRunError, match=r"cut.json: .*truncated"):
        _read(cut)


def test_appended_runs_are_refused(fixtures: Path, tmp_path: Path) -> None:
    one = (fixtures / "vllm-bench" / "run1.json").read_text()
    both = tmp_path / "appended.json"
    both.write_text(one + "\n" + one)  # what --append-result writes
    with pytest.raises(SavedRunError, match="2 vllm-bench runs appended"):
        _read(both)


def generated(n: int, tokens: int = 5) -> dict[str, Any]:
    """A result of ``n`` requests in vLLM's layout; every 7th failed."""
    fail = [i % 7 == 3 for i in range(n)]
    return {
        "date": "20261206-101500", "backend": "openai-chat", "model_id": "m", "num_prompts": n,
        "duration": 9.5, "completed": n - sum(fail), "failed": sum(fail),
        "input_lens": [10 + i % 50 for i in range(n)],
        "output_lens": [0 if f else tokens for f in fail],
        "ttfts": [0.0 if f else 0.01 + i * 1e-6 for i, f in enumerate(fail)],
        "itls": [[] if f else [0.002 + j * 1e-4 for j in range(tokens - 1)] for f in fail],
        "latencies": [0.0 if f else 0.05 + i * 1e-6 for i, f in enumerate(fail)],
        "start_times": [float(i) for i in range(n)],
        "generated_texts": ["" if f else f"out {i} \"quoted\" ]" for i, f in enumerate(fail)],
        "errors": ["Bad Request" if f else "" for f in fail],
        "mean_ttft_ms": 12.5,
    }


def test_streamed_columns_stay_aligned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonscan, "SMALL", 256)  # every column goes the streamed way
    doc = generated(500)
    path = tmp_path / "gen.json"
    path.write_text(json.dumps(doc))
    header, requests = _read(path)
    assert header.summary["mean_ttft_ms"] == 12.5
    assert len(requests) == 500
    for i, r in enumerate(requests):
        assert r.ok == (doc["errors"][i] == "")
        if r.ok:
            assert (r.ttft, r.e2e, r.itl) == (doc["ttfts"][i], doc["latencies"][i], tuple(doc["itls"][i]))
            assert r.output_text == doc["generated_texts"][i]
        assert r.input_tokens == doc["input_lens"][i]


def test_a_column_shorter_than_the_others_is_refused(tmp_path: Path) -> None:
    doc = generated(20)
    doc["ttfts"] = doc["ttfts"][:15]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    run = vllm_bench.read(path, "short.json")
    with pytest.raises(SavedRunError, match=r"short\.json: column ttfts ends after 15 requests"):
        list(run.requests)


def test_damage_inside_a_streamed_column_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonscan, "SMALL", 256)
    text = json.dumps(generated(200))
    at = text.index('"itls": [') + 400
    path = tmp_path / "damaged.json"
    path.write_text(text[:at] + "]]x[[" + text[at:])
    with pytest.raises(SavedRunError, match=r"damaged\.json: "):
        list(vllm_bench.read(path, "damaged.json").requests)


def test_older_files_without_latencies_add_up_the_gaps(tmp_path: Path) -> None:
    doc = generated(10)
    del doc["latencies"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    r = next(iter(vllm_bench.read(path, "old.json").requests))
    assert r.e2e == pytest.approx(r.ttft + sum(doc["itls"][0]))
