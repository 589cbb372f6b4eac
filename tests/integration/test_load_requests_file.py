"""``abserve load --requests-file``: a gateway's OpenAI request log sent by a real headless
Locust run to a real local server (``TokenizingUpstream``), checked on what ARRIVED there: the
run's model in every body, local images inlined byte for byte, the completions request on its
own endpoint, the tags of each request (profile, items, source line, the line's own), and the
client's timing file replaying the recorded arrivals at ``--time-scale``."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support import traffic_files as tf
from tests.support.fake_upstream import Knobs
from tests.support.tokenizing_upstream import TokenizingUpstream

from abserve.traffic.timing import read_timings

REPO = Path(__file__).resolve().parents[2]
LINES = 7  # six chat requests 0.05 s apart and a completions request


@pytest.fixture
def upstream() -> Iterator[TokenizingUpstream]:
    with TokenizingUpstream(Knobs(n_tokens=4)) as up:
        yield up


@pytest.mark.timeout(120)
def test_a_gateway_log_arrives_as_logged_at_its_recorded_times(upstream: TokenizingUpstream,
                                                                tmp_path: Path) -> None:
    path = tf.openai_file(tmp_path, n=LINES - 1, gap_s=0.05)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "abserve", "load", "--requests-file", str(path), "--host", upstream.url,
         "--model", "tiny-llava", "--users", "2", "--time-scale", "4", "--out", str(out)],
        cwd=REPO, text=True, capture_output=True, timeout=100,
        env={**os.environ, "PYTHONPATH": str(REPO / "service")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{path}: 7 requests (6 chat/completions, 1 completions), 6 images" in proc.stdout
    arrived = sorted(upstream.arrivals, key=lambda a: int(a[0]["x-abserve-source-line"]))
    assert [int(h["x-abserve-source-line"]) for h, _ in arrived] == list(range(1, LINES + 1))
    assert {b["model"] for _, b in arrived} == {"tiny-llava"}
    assert "prompt" in arrived[-1][1]
    assert "messages" not in arrived[-1][1]
    for headers, body in arrived[:-1]:
        parts = body["messages"][0]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert headers["x-abserve-items"] == str(len(urls))
        assert headers["x-abserve-profile"] == "file-gateway"
        assert headers["x-abserve-tenant"] in ("t0", "t1")
        for k, url in enumerate(urls):
            name = f"img{k}.{'png' if k % 2 == 0 else 'jpg'}"
            assert base64.b64decode(url.split(",", 1)[1]) == (tmp_path / "images" / name).read_bytes()
    records = sorted(read_timings([out / "timings.jsonl"]), key=lambda r: r.corpus_index)
    assert [round(r.scheduled_offset_s or 0, 3) for r in records] == [round(0.2 * k, 3) for k in range(LINES)]
    assert all(r.ok for r in records)
    # replayed over the recorded 1.2 s (at once would take a few ms); a busy machine may send the
    # first request late, never a later one early, so the span is bounded below, not pinned
    assert records[-1].sent_at - records[0].sent_at >= 0.6
