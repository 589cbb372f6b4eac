"""Each reader of ``abserve.traffic.sources``: OpenAI request JSONL, the ``vllm bench serve``
data sets, abserve's corpus JSONL, and the streamed line reader under them."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.support import traffic_files as tf

from abserve.traffic.sources import FileSource, RequestsFileError, accepted, check_file, lines
from abserve.traffic.sources.reader import Accepted


def sent(path: Path, **options: object) -> list[Accepted]:
    items = list(accepted(FileSource.model_validate({"path": path, "model": "tiny-llava", **options})))
    assert all(isinstance(i, Accepted) for i in items), items
    return [i for i in items if isinstance(i, Accepted)]


def body(item: Accepted) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(item.entry.body)
    return out


def image_urls(b: dict[str, Any]) -> list[str]:
    return [p["image_url"]["url"] for m in b["messages"] for p in m["content"]
            if isinstance(p, dict) and p.get("type") == "image_url"]


def test_openai_jsonl_wrappers_bare_bodies_and_completions(tmp_path: Path) -> None:
    items = sent(tf.openai_file(tmp_path, n=3, gap_s=0.5))
    assert [i.entry.path for i in items] == ["/v1/chat/completions"] * 3 + ["/v1/completions"]
    assert [i.arrival for i in items] == [1_700_000_000 + k * 0.5 for k in range(4)]
    first = body(items[0])
    assert first["model"] == "tiny-llava"  # the run's served model replaces the gateway's
    assert "timestamp" not in first
    assert "tags" not in first
    assert items[0].entry.tags["x-abserve-tenant"] == "t0"
    assert body(items[3])["prompt"] == tf.text(99)
    assert "messages" not in body(items[3])


def test_local_image_paths_are_inlined_as_data_urls_with_their_bytes(tmp_path: Path) -> None:
    items = sent(tf.openai_file(tmp_path, n=3))
    urls = image_urls(body(items[2]))
    assert len(urls) == 2
    assert all(u.startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))
                                  for u in urls)
    raw = (tmp_path / "images" / "img0.png").read_bytes()
    assert base64.b64decode(urls[0].split(",", 1)[1]) == raw
    entry = items[2].entry
    assert entry.n_images == 2
    assert entry.image_hashes[0] == hashlib.sha256(raw).hexdigest()
    assert entry.tags["x-abserve-items"] == "2"
    assert int(entry.tags["x-abserve-token-estimate"]) == 12 + 2 * 4


def test_iso_timestamps_and_offsets_are_arrivals(tmp_path: Path) -> None:
    rows = [{**tf.chat_body(0, []), "timestamp": "2026-01-01T00:00:00+00:00"},
            {**tf.chat_body(1, []), "timestamp": "2026-01-01T00:00:01.5+00:00"}]
    first, second = sent(tf.write_jsonl(tmp_path / "iso.jsonl", rows))
    assert second.arrival - first.arrival == pytest.approx(1.5)  # type: ignore[operator]
    rows = [{**tf.chat_body(0, []), "offset": 0}, {**tf.chat_body(1, []), "offset_s": 2.5}]
    assert [i.arrival for i in sent(tf.write_jsonl(tmp_path / "off.jsonl", rows))] == [0.0, 2.5]


def test_bench_custom_and_custom_mm_lines(tmp_path: Path) -> None:
    plain, files, content = sent(tf.bench_custom_file(tmp_path), max_tokens=9)
    assert body(plain)["max_tokens"] == 6
    assert image_urls(body(plain)) == []
    assert body(files)["max_tokens"] == 9  # no output_tokens: the source's max_tokens
    parts = body(files)["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]  # text, then images
    assert [p["type"] for p in body(content)["messages"][0]["content"]] == [
        "text", "image_url", "text", "image_url"]
    for item in (plain, files, content):
        b = body(item)
        assert b["temperature"] == 0.0
        assert b["stream"] is True
        assert b["ignore_eos"] is True


def test_sharegpt_array_places_images_at_their_markers_with_line_numbers(tmp_path: Path) -> None:
    items = sent(tf.sharegpt_file(tmp_path))
    assert len(items) == 4
    lines_of = [int(i.entry.tags["x-abserve-source-line"]) for i in items]
    text = (tmp_path / "sharegpt.json").read_text().splitlines()
    assert all('"id"' in text[n - 1] or "{" in text[n - 1] for n in lines_of)
    assert lines_of == sorted(lines_of)
    assert len(set(lines_of)) == 4
    marked = body(items[1])["messages"][0]["content"]
    assert marked[0]["type"] == "image_url"  # "<image>\n..." puts the image first
    assert "<image>" not in json.dumps(marked)
    assert [p["type"] for p in body(items[2])["messages"][0]["content"]] == [
        "text", "image_url", "image_url"]


def test_abserve_corpus_lines_keep_their_body_and_refuse_an_edit(tmp_path: Path) -> None:
    path = tf.corpus_file(tmp_path, n=3)
    items = sent(path)
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [body(i)["messages"] for i in items] == [w["body"]["messages"] for w in written]
    assert items[1].entry.tags["x-abserve-corpus-profile"] == "many-items"
    assert items[1].entry.n_images == written[1]["n_images"]
    written[1]["body"]["max_tokens"] = 99
    edited = tf.write_jsonl(tmp_path / "edited.jsonl", written)
    with pytest.raises(RequestsFileError, match=r"edited\.jsonl:2: .*body_sha256"):
        check_file(FileSource(path=edited, model="tiny-llava"))


def test_a_json_array_is_read_element_by_element(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "CHUNK_CHARS", 7)  # every element spans several refills
    path = tmp_path / "a.json"
    path.write_text('[\n {"a": 1},\n {"b": "x\\ny"},\n\n {"c": [1, 2,\n 3]}, 12345\n]\n')
    got = [(i.line, i.value) for i in lines.iter_items(path)]
    assert got == [(2, {"a": 1}), (3, {"b": "x\ny"}), (5, {"c": [1, 2, 3]}), (6, 12345)]
    path.write_text('[\n {"a": 1},\n {"b": \n')
    with pytest.raises(RequestsFileError, match=r"a\.json:3: the array element starting here"):
        list(lines.iter_items(path))


def test_jsonl_is_read_lazily_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"a": 1}\n\n{broken\n{"b": 2}\n')
    stream = lines.iter_items(path)
    assert next(stream) == lines.RawItem(1, {"a": 1})
    bad = next(stream)
    assert bad.line == 3
    assert bad.error is not None
    assert "not valid JSON" in bad.error
    assert next(stream) == lines.RawItem(4, {"b": 2})


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_a_file_is_checked_and_sent_in_memory_far_below_its_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    import tracemalloc

    from abserve.traffic.sources import window

    monkeypatch.setattr(lines, "CHUNK_CHARS", 1 << 14)
    pad = " and more" * 200
    rows = [orjson.dumps({**tf.chat_body(k, []), "tags": {"n": str(k)}, "pad": pad}) for k in range(3000)]
    path = tmp_path / f"big.{layout}"
    path.write_bytes(b"\n".join(rows) + b"\n" if layout == "jsonl" else b"[" + b",\n".join(rows) + b"]")
    del rows
    size = path.stat().st_size
    assert size > 5_000_000
    src = FileSource(path=path, model="tiny-llava", format="openai")
    tracemalloc.start()
    try:
        total = check_file(src).requests
        sent = sum(1 for _ in window(src, total))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == sent == 3000
    assert peak < size / 20, (peak, size)


def test_a_utf8_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    (tmp_path / "l.jsonl").write_bytes(bom + b'{"a": 1}\n{"b": 2}\n')
    (tmp_path / "a.json").write_bytes(bom + b'[{"a": 1}, {"b": 2}]')
    for name in ("l.jsonl", "a.json"):
        assert [i.value for i in lines.iter_items(tmp_path / name)] == [{"a": 1}, {"b": 2}]
