"""The image URL hash of the records: XXH3-128 now, the older schemes still recomputed."""

from __future__ import annotations

import pytest

from abserve.base.url_hash import SCHEME, record_hash, url_hash

URL = "data:image/png;base64,AAAA"


@pytest.mark.parametrize(("scheme", "digest"), [
    ("xxh3-128", "b1a77966490d1dadb1931ca5aab68b30"),
    ("blake3", "2d184db947f70783c8cdc0517d7e3e38403455aa7b861a21924530fde8dcdbd4"),
    ("sha256", "bde6da8e9d3902a86a1452ec62648cd07cb1cfbae0ec8dd5142ad881c7aa2ba0"),
])
def test_each_scheme_records_have_carried_is_recomputed_exactly(scheme: str, digest: str) -> None:
    assert url_hash(URL, scheme) == f"{scheme}:{digest}"


def test_the_router_writes_xxh3_128_and_an_unknown_scheme_is_none() -> None:
    assert SCHEME == "xxh3-128"
    assert record_hash(URL) == url_hash(URL, "xxh3-128")
    assert url_hash(URL, "md5") is None
