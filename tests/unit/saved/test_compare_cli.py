"""``abserve compare`` end to end on small vllm-bench-format files: exit codes, report files, the
first screen's honesty, and the refusals (exit 4, one line naming the file)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from abserve.cli import app


def bench_file(path: Path, seed: int, factor: float = 1.0, n: int = 200, model: str = "tiny-llava",
               level: float = 0.0) -> str:
    """A ``vllm bench serve --save-detailed`` result of ``n`` requests (the fields the reader needs)."""
    rng = np.random.default_rng(seed)
    out_lens = rng.integers(8, 24, n).tolist()
    itls = [(0.01 * factor * (1 + level) * rng.lognormal(0, 0.2, k - 1)).tolist() for k in out_lens]
    ttfts = (0.05 * factor * (1 + level) * rng.lognormal(0, 0.3, n)).tolist()
    latencies = [t + sum(g) for t, g in zip(ttfts, itls, strict=True)]
    doc = {"date": "20261206-074005", "endpoint_type": "openai-chat", "backend": "openai-chat",
           "label": None, "model_id": model, "tokenizer_id": model, "num_prompts": n, "request_rate": "inf",
           "burstiness": 1.0, "max_concurrency": 2, "duration": 10.0, "completed": n, "failed": 0,
           "total_input_tokens": 100 * n, "total_output_tokens": sum(out_lens),
           "request_throughput": n / 10.0, "input_lens": [100] * n, "output_lens": out_lens,
           "ttfts": ttfts, "itls": itls, "latencies": latencies, "start_times": [0.0] * n,
           "generated_texts": ["x"] * n, "errors": [""] * n}
    path.write_text(json.dumps(doc))
    return str(path)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["compare", *args])
    return result.exit_code, result.output


def test_aa_with_repeats_passes_and_the_first_screen_says_unpaired(tmp_path: Path) -> None:
    files = [bench_file(tmp_path / f"{i}.json", i, n=400, level=0.005 * (i % 3)) for i in range(6)]
    code, out = run(*(f"--{'baseline' if i < 3 else 'candidate'}={f}" for i, f in enumerate(files)),
                    "--out", str(tmp_path / "r"))
    assert code == 0, out
    for name in ("report.html", "report.md", "report.json", "junit.xml"):
        assert (tmp_path / "r" / name).exists()
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    first = " ".join(s["text"] for s in report["summary"]["sentences"])
    assert "weaker than a paired abserve run" in first
    assert "abserve run CONFIG" in first
    assert "run-to-run spread over within-run error" in first
    assert "equality was not measured" in first
    assert report["unpaired"]["design"] == "clustered"
    assert all(m["method"] == "unpaired" for m in report["metrics"])


def test_one_run_per_side_is_inconclusive_and_a_big_slowdown_fails(tmp_path: Path) -> None:
    a, b = bench_file(tmp_path / "a.json", 1), bench_file(tmp_path / "b.json", 2)
    code, out = run("--baseline", a, "--candidate", b, "--out", str(tmp_path / "aa"))
    assert code == 2, out
    first = json.loads((tmp_path / "aa" / "report.json").read_text())["summary"]["sentences"][0]["text"]
    assert "nothing can pass" in first
    assert "12%" in first
    slow = bench_file(tmp_path / "slow.json", 3, factor=1.6)
    code, out = run("--baseline", a, "--candidate", slow, "--out", str(tmp_path / "ab"))
    assert code == 1, out


def test_refusals_exit_4_naming_the_file(tmp_path: Path) -> None:
    a = bench_file(tmp_path / "a.json", 1)
    other = bench_file(tmp_path / "other.json", 2, model="another-model")
    code, out = run("--baseline", a, "--candidate", other, "--out", str(tmp_path / "r"))
    assert code == 4
    assert "other.json" in out
    assert "another-model" in out
    truncated = tmp_path / "cut.json"
    truncated.write_text(Path(a).read_text()[:500])
    code, out = run("--baseline", a, "--candidate", str(truncated), "--out", str(tmp_path / "r"))
    assert code == 4
    assert "cut.json" in out
    summary_only = tmp_path / "summary.json"
    summary_only.write_text(json.dumps({"completed": 10, "mean_ttft_ms": 50.0, "model_id": "tiny-llava"}))
    code, out = run("--baseline", a, "--candidate", str(summary_only), "--out", str(tmp_path / "r"))
    assert code == 4
    assert "summary.json" in out
    empty = tmp_path / "empty.json"
    bench_file(empty, 1, n=0)
    code, out = run("--baseline", a, "--candidate", str(empty), "--out", str(tmp_path / "r"))
    assert code == 4
    assert "empty.json" in out
    assert not (tmp_path / "r").exists()
