"""One reading of ``data:`` URLs (``abserve.traffic.images``) for the corpus's checks and for
the images of a traffic file (``traffic.sources.prepare``)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from tests.support import traffic_files as tf

from abserve.traffic.images import data_url_bytes, decode_data_url, make_image
from abserve.traffic.sources import FileSource, accepted
from abserve.traffic.sources.reader import Accepted, Problem


def test_a_data_urls_bytes_base64_or_as_written() -> None:
    assert data_url_bytes("data:image/png;base64," + base64.b64encode(b"\x89PNG").decode()) == b"\x89PNG"
    assert data_url_bytes("data:text/plain,hello") == b"hello"
    with pytest.raises(ValueError):
        data_url_bytes("data:image/png;base64,not*base64")


def test_decode_data_url_takes_only_base64_images() -> None:
    image = make_image(1, 4, 4, "png")
    assert len(decode_data_url(image.data_url)) == image.n_bytes
    for url in ("data:text/plain;base64,aGk=", "data:image/png,raw", "no comma"):
        with pytest.raises(ValueError, match="not a base64 image data URL"):
            decode_data_url(url)


def test_a_traffic_file_line_with_broken_base64_is_named(tmp_path: Path) -> None:
    good = make_image(2, 4, 4, "png").data_url
    rows = [tf.chat_body(k, [url]) for k, url in enumerate((good, "data:image/png;base64,@@@"))]
    items = list(accepted(FileSource(path=tf.write_jsonl(tmp_path / "t.jsonl", rows), model="m")))
    assert isinstance(items[0], Accepted)
    assert isinstance(items[1], Problem)
    assert items[1].line == 2
    assert items[1].reason == "a data: URL's base64 is broken"
