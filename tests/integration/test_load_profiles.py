"""Each traffic profile, sent by a real headless Locust run to a real local server.

The server is ``TokenizingUpstream`` (the project's fake vLLM plus a vLLM-style
``/tokenize``); the checks are on what ARRIVED there: image counts and bytes, formats,
repeated hashes for ``cache-reuse``, span placement for ``chunk-boundary`` (re-tokenized with
the server's own function), the tags in the headers, and the client's timing file.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from tests.support.fake_upstream import Knobs
from tests.support.tokenizing_upstream import IMAGE_TOKEN, TokenizingUpstream, tokenize_prompt

from abserve.traffic.calibrate import image_spans
from abserve.traffic.images import decode_data_url
from abserve.traffic.runner import LoadError, LoadSpec, run_load
from abserve.traffic.sender import API_KEY_ENV
from abserve.traffic.timing import read_timings

N = 4
# Small but faithful: each override keeps the profile's intent at test speed.
PROFILES: dict[str, list[str]] = {
    "multi-image-long-context": ["text.words=[300,600]"],
    "many-items": ["images.count=[256,300]"],
    "chunk-boundary": ["chunk_boundary.max_num_batched_tokens=64"],
    "cache-reuse": [],
    "interleaved": [],
}


@pytest.fixture
def upstream() -> Iterator[TokenizingUpstream]:
    with TokenizingUpstream(Knobs(n_tokens=4)) as up:
        yield up


def images_of(body: dict[str, Any]) -> list[bytes]:
    parts = body["messages"][0]["content"]
    return [decode_data_url(p["image_url"]["url"]) for p in parts if p["type"] == "image_url"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_arrives_as_specified(name: str, upstream: TokenizingUpstream,
                                      tmp_path: Path) -> None:
    summary = run_load(LoadSpec(name, upstream.url, requests=N, users=2, seed=9, run_id=f"t-{name}",
                       out_dir=tmp_path, overrides=PROFILES[name], timeout_s=30))
    assert (summary.requests_sent, summary.failures, summary.stop_reason) == (N, 0, "completed")
    headers = [h for h, _ in upstream.arrivals]
    bodies = [b for _, b in upstream.arrivals]
    assert len(bodies) == N
    indices = sorted(int(h["x-abserve-corpus-index"]) for h in headers)
    assert indices == list(range(N))
    hashes: list[list[str]] = []
    for body, head in zip(bodies, headers, strict=True):
        images = images_of(body)
        assert head["x-abserve-run-id"] == f"t-{name}"
        assert head["x-abserve-profile"] == name
        assert int(head["x-abserve-items"]) == len(images)
        hashes.append([hashlib.sha256(i).hexdigest() for i in images])
        for raw in images[:8]:
            assert Image.open(io.BytesIO(raw)).format in ("PNG", "JPEG")
        _check_profile(name, body, images, hashes[-1])
    if name == "cache-reuse":
        assert all(h == hashes[0] for h in hashes), "cache-reuse must repeat the same images"
    else:
        flat = [h for hs in hashes for h in hs]
        assert len(set(flat)) == len(flat), "images must differ unless the profile reuses them"
    records = read_timings([summary.timings_path])
    assert sorted(r.corpus_index for r in records) == list(range(N))
    assert all(r.ttft_s is not None and r.e2e_s and r.n_token_events == 4 for r in records)


def _check_profile(name: str, body: dict[str, Any], images: list[bytes],
                   hashes: list[str]) -> None:
    if name == "many-items":
        assert 256 <= len(images) <= 300
        assert all(Image.open(io.BytesIO(i)).size == (28, 28) for i in images[:20])
    elif name == "multi-image-long-context":
        assert 3 <= len(images) <= 8
        text = " ".join(p["text"] for p in body["messages"][0]["content"] if p["type"] == "text")
        assert 300 <= len(text.split()) <= 600
    elif name == "chunk-boundary":
        spans = image_spans(tokenize_prompt(body["messages"]), IMAGE_TOKEN)
        assert len(spans) == 3
        for k, span in enumerate(spans):
            boundary = 64 * (k + 1)
            assert span.offset == boundary or span.end == boundary or (
                span.offset < boundary < span.end), f"span {k} misses boundary {boundary}"
    elif name == "interleaved":
        kinds = [p["type"] for p in body["messages"][0]["content"]]
        assert kinds[0] == "text"
        assert kinds[-1] == "text"
        assert all(a != b for a, b in itertools.pairwise(kinds))


@pytest.mark.timeout(60)
def test_open_loop_constant_rate_is_kept_and_recorded(upstream: TokenizingUpstream,
                                                      tmp_path: Path) -> None:
    summary = run_load(LoadSpec("interleaved", upstream.url, requests=6, users=3, seed=1, run_id="ol",
                       out_dir=tmp_path, shape="constant", rate=10.0, timeout_s=30))
    records = sorted(read_timings([summary.timings_path]), key=lambda r: r.sent_at)
    assert len(records) == 6
    assert [r.scheduled_offset_s for r in records] == pytest.approx([0.0, .1, .2, .3, .4, .5])
    assert all(r.target_rate == 10.0 and (r.lateness_s or 0) < 0.05 for r in records)
    span = records[-1].sent_at - records[0].sent_at
    assert 0.45 < span < 0.6


@pytest.mark.timeout(60)
def test_run_stops_early_when_the_error_rate_passes_the_limit(tmp_path: Path) -> None:
    with TokenizingUpstream(Knobs(status=500)) as up:
        summary = run_load(LoadSpec("interleaved", up.url, requests=200, users=2, seed=1, run_id="bad",
                           out_dir=tmp_path, max_error_rate=0.1, timeout_s=30))
    assert summary.stop_reason == "error_rate"
    assert summary.exit_code == 3
    assert 10 <= summary.requests_sent < 200
    assert summary.failures == summary.requests_sent


@pytest.mark.timeout(60)
def test_setup_errors_are_reported_not_hidden(upstream: TokenizingUpstream,
                                              tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="too small"):
        run_load(LoadSpec("chunk-boundary", upstream.url, requests=2, users=1, seed=1, run_id="x",
                 out_dir=tmp_path, overrides=["chunk_boundary.max_num_batched_tokens=4"],
                 timeout_s=30))


@pytest.mark.timeout(60)
def test_duration_bounded_poisson_run_stops_by_itself(upstream: TokenizingUpstream,
                                                      tmp_path: Path) -> None:
    summary = run_load(LoadSpec("cache-reuse", upstream.url, duration=1.5, users=2, seed=2,
                       run_id="dur", out_dir=tmp_path, shape="poisson", rate=8.0, timeout_s=30))
    records = read_timings([summary.timings_path])
    assert summary.stop_reason == "completed"
    assert summary.failures == 0
    assert 3 <= len(records) <= 30
    assert all(r.scheduled_offset_s is not None and r.scheduled_offset_s < 1.5 for r in records)


@pytest.mark.timeout(120)
def test_run_tags_arrive_as_headers_on_every_request(upstream: TokenizingUpstream,
                                                     tmp_path: Path) -> None:
    tags = {"block": "1", "placement": "a:1,b:0"}
    summary = run_load(LoadSpec("interleaved", upstream.url, requests=3, users=1, seed=2, run_id="t-tags",
                       out_dir=tmp_path, timeout_s=30, tags=tags))
    assert summary.requests_sent == 3
    headers = [h for h, _ in upstream.arrivals]
    assert len(headers) == 3
    assert all(h["x-abserve-block"] == "1" and h["x-abserve-placement"] == "a:1,b:0" for h in headers)


@pytest.mark.timeout(120)
def test_the_api_key_reaches_locust_only(upstream: TokenizingUpstream, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    key = "load-spec-key-0123456789"
    spec = LoadSpec("interleaved", upstream.url, requests=2, users=1, seed=2, run_id="t-key",
                    out_dir=tmp_path, timeout_s=30, api_key=key)
    assert run_load(spec).requests_sent == 2
    assert [h.get("authorization") for h, _ in upstream.arrivals] == [f"Bearer {key}"] * 2
    assert API_KEY_ENV not in os.environ
    assert key not in repr(spec)
