"""Unit tests of the traffic core: profiles, the seeded corpus, JSONL replay, calibration."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.support.tokenizing_upstream import IMAGE_TOKEN, MAX_MODEL_LEN, tokenize_prompt

from abserve.traffic.calibrate import (
    CalibrationError,
    Tokenized,
    find_image_token,
    image_spans,
    target_offset,
)
from abserve.traffic.corpus import build_corpus, read_jsonl, write_jsonl
from abserve.traffic.images import decode_data_url
from abserve.traffic.profiles import (
    ProfileError,
    available_profiles,
    load_profile,
    parse_overrides,
)

SMALL_MANY = {"images.count": [20, 30]}


def fake_tokenizer(messages: list[dict[str, Any]]) -> Tokenized:
    return Tokenized(tokenize_prompt(messages), MAX_MODEL_LEN)


def image_urls(body: bytes) -> list[str]:
    content = orjson.loads(body)["messages"][0]["content"]
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def test_every_shipped_profile_loads_and_is_documented() -> None:
    names = available_profiles()
    assert set(names) >= {"multi-image-long-context", "many-items", "chunk-boundary",
                          "cache-reuse", "interleaved"}
    for name in names:
        profile = load_profile(name)
        assert profile.name == name
        assert profile.description


def test_overrides_apply_and_bad_input_is_refused_clearly() -> None:
    profile = load_profile("many-items", parse_overrides(["images.count=[2,3]", "max_tokens=5"]))
    assert profile.images.count == (2, 3)
    assert profile.max_tokens == 5
    with pytest.raises(ProfileError, match="unknown traffic profile"):
        load_profile("no-such-profile")
    with pytest.raises(ProfileError, match="min <= max"):
        load_profile("many-items", {"images.count": [5, 2]})
    with pytest.raises(ProfileError, match="key=value"):
        parse_overrides(["oops"])
    with pytest.raises(ProfileError, match="extra"):
        load_profile("many-items", {"images.colour": "red"})


def test_same_seed_gives_byte_identical_corpus_and_shards_partition_it() -> None:
    profile = load_profile("interleaved")
    full = build_corpus(profile, 11, 7, "m")
    again = build_corpus(profile, 11, 7, "m")
    assert [e.body for e in full] == [e.body for e in again]
    shards = [build_corpus(profile, 11, 7, "m", shard=s, shards=3) for s in range(3)]
    union = sorted((e for part in shards for e in part), key=lambda e: e.index)
    assert [e.index for e in union] == list(range(7))
    assert [e.body for e in union] == [e.body for e in full]
    other = build_corpus(profile, 12, 7, "m")
    assert all(a.body != b.body for a, b in zip(full, other, strict=True))


def test_many_items_images_are_distinct_small_pngs_and_tags_match() -> None:
    profile = load_profile("many-items", SMALL_MANY)
    (entry,) = build_corpus(profile, 5, 1, "m")
    urls = image_urls(entry.body)
    assert 20 <= len(urls) == entry.n_images <= 30
    assert len(set(entry.image_hashes)) == len(urls)
    raw = decode_data_url(urls[0])
    assert raw.startswith(b"\x89PNG")
    assert hashlib.sha256(raw).hexdigest() == entry.image_hashes[0]
    assert entry.tags["x-abserve-items"] == str(len(urls))
    assert entry.tags["x-abserve-corpus-index"] == "0"
    body = orjson.loads(entry.body)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_cache_reuse_repeats_the_same_images_in_the_same_order() -> None:
    entries = build_corpus(load_profile("cache-reuse"), 4, 5, "m")
    assert len({e.image_hashes for e in entries}) == 1
    assert len(set(entries[0].image_hashes)) == 4  # distinct within a request
    texts = [orjson.loads(e.body)["messages"][0]["content"][-1]["text"] for e in entries]
    prefix = [t.split()[:200] for t in texts]
    assert all(p == prefix[0] for p in prefix)


def test_jsonl_replay_is_byte_identical_and_detects_tampering(tmp_path: Path) -> None:
    entries = build_corpus(load_profile("multi-image-long-context"), 1, 4, "m")
    path = tmp_path / "c.jsonl"
    assert write_jsonl(entries, path) == 4
    back = read_jsonl(path)
    assert [e.body for e in back] == [e.body for e in entries]
    assert [e.index for e in read_jsonl(path, shard=1, shards=2)] == [1, 3]
    path.write_bytes(path.read_bytes().replace(b'"max_tokens":32', b'"max_tokens":33', 1))
    with pytest.raises(ValueError, match="hash"):
        read_jsonl(path)


def test_chunk_boundary_spans_start_end_and_straddle_multiples_of_the_budget() -> None:
    profile = load_profile("chunk-boundary", {"chunk_boundary.max_num_batched_tokens": 64})
    entries = build_corpus(profile, 3, 3, "m", tokenizer=fake_tokenizer)
    seen = set()
    for entry in entries:
        messages = orjson.loads(entry.body)["messages"]
        spans = image_spans(tokenize_prompt(messages), IMAGE_TOKEN)
        assert [(s.offset, s.length) for s in spans] == [(s.offset, s.length) for s in entry.spans]
        for k, span in enumerate(entry.spans):
            boundary = 64 * (k + 1)
            assert span.boundary == boundary
            if span.placement == "start":
                assert span.offset == boundary
            elif span.placement == "end":
                assert span.offset + span.length == boundary
            else:
                assert span.offset < boundary < span.offset + span.length
            seen.add(span.placement)
        assert int(entry.tags["x-abserve-token-estimate"]) == len(tokenize_prompt(messages))
    assert seen == {"start", "end", "straddle"}


def test_chunk_boundary_needs_a_tokenizer_and_room() -> None:
    profile = load_profile("chunk-boundary")
    with pytest.raises(ValueError, match="tokenize"):
        build_corpus(profile, 1, 1, "m")
    tight = load_profile("chunk-boundary", {"chunk_boundary.max_num_batched_tokens": 4})
    with pytest.raises(CalibrationError, match=r"too small|before the prompt"):
        build_corpus(tight, 1, 1, "m", tokenizer=fake_tokenizer)
    huge = load_profile("chunk-boundary", {"chunk_boundary.max_num_batched_tokens": 4096})
    with pytest.raises(CalibrationError, match="max_model_len"):
        build_corpus(huge, 1, 1, "m", tokenizer=fake_tokenizer)


def test_image_token_is_found_by_difference_and_targets_are_exact() -> None:
    entry = build_corpus(load_profile("interleaved"), 1, 1, "m")[0]
    assert find_image_token(fake_tokenizer, image_urls(entry.body)[0]) == IMAGE_TOKEN
    assert [target_offset(64, 4, p) for p in ("start", "end", "straddle")] == [64, 60, 62]
    with pytest.raises(CalibrationError):
        target_offset(64, 1, "straddle")
