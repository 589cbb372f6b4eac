"""The byte-range scan of a flat JSON object: keys found outside strings only, nested objects
folded back, large arrays streamed item by item."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abserve.saved import jsonscan
from abserve.saved.jsonscan import LayoutError, scan_keys, stream_array, top_level


def _write(tmp_path: Path, doc: Any, indent: int | None = None) -> Path:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, indent=indent))
    return path


TRICKY = ['he said "ttfts": [1, 2]', "a, \"b\": [", "back\\slash\\", '{"x": 1}', "ünï ✓"]


@pytest.mark.parametrize("indent", [None, 2])
def test_keys_inside_strings_are_not_keys(tmp_path: Path, indent: int | None) -> None:
    doc = {"date": "d", "texts": TRICKY, "meta": {"a": 1, "b": [1, {"c": 2}]}, "ttfts": [0.5, 0.25], "z": 3}
    path = _write(tmp_path, doc, indent=indent)
    small, large = top_level(path, scan_keys(path))
    assert small == doc
    assert large == {}


def test_large_values_are_streamed_not_parsed_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonscan, "SMALL", 64)
    itls = [[i * 0.5, i * 0.25] for i in range(50)]
    texts = [f"t{i} \"q\" ]," for i in range(50)]
    path = _write(tmp_path, {"n": 50, "texts": texts, "itls": itls, "end": 1.5})
    small, large = top_level(path, scan_keys(path))
    assert small == {"n": 50, "end": 1.5}
    assert set(large) == {"texts", "itls"}
    assert list(stream_array(path, large["itls"])) == itls
    assert list(stream_array(path, large["texts"]))[7] == 't7 "q" ],'


def test_a_cut_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text('{"a": [1, 2, 3')
    with pytest.raises(LayoutError, match="truncated"):
        scan_keys(path)


def test_a_large_value_that_is_not_an_array_is_refused(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonscan, "SMALL", 16)
    path = _write(tmp_path, {"meta": {"k1": "v" * 40, "k2": 1}, "x": 1})
    with pytest.raises(LayoutError, match="meta"):
        top_level(path, scan_keys(path))


def test_scan_crosses_chunk_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonscan, "CHUNK", 1000)
    doc = {f"key{i:04d}": list(range(i % 7)) for i in range(400)}
    path = _write(tmp_path, doc)
    assert [s.key for s in scan_keys(path)] == list(doc)
    small, _ = top_level(path, scan_keys(path))
    assert small == doc
