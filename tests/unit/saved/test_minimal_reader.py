"""The minimal vllm bench serve reader (``abserve.saved.minimal_reader``, the seam the full
readers replace): its one-line refusals and vLLM's own TPOT definition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abserve.saved.minimal_reader import open_saved
from abserve.saved.model import SavedRunError


def test_refusals_name_the_file_and_why(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text('{"ttfts": [0.1, ')
    with pytest.raises(SavedRunError, match=r"cut\.json: not JSON or truncated"):
        open_saved(str(cut))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"completed": 3, "mean_ttft_ms": 5.0}))
    with pytest.raises(SavedRunError, match=r"summary\.json: .*without per-request data"):
        open_saved(str(summary))
    with pytest.raises(SavedRunError, match=r"missing\.json: cannot read"):
        open_saved(str(tmp_path / "missing.json"))


def test_requests_and_tpot(tmp_path: Path) -> None:
    doc = {"model_id": "m", "duration": 1.0, "ttfts": [0.1, 0.2, None], "itls": [[0.01, 0.03], [], []],
           "latencies": [0.14, 0.2, None], "output_lens": [3, 1, 0], "errors": ["", "", "timeout"],
           "generated_texts": ["abc", "d", ""]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    run = open_saved(str(path))
    first, single, failed = list(run.requests)
    assert first.tpot == pytest.approx(0.02)
    assert first.output_text == "abc"
    assert single.ok
    assert single.tpot is None
    assert not failed.ok
    assert failed.error == "timeout"
    assert run.header.model == "m"
