"""The hash an exchange record keeps of each image URL, in place of the image.

The router hashes every image URL of a request (a data URL is the image's bytes, ~250 KB
each in a 1 MB multimodal request) and keeps ``<scheme>:<hex digest>``. The hash names an
image in the record and in the report (which rebuilds abserve's own corpus images and
shows them only when they hash to what was recorded); nothing trusts it against an
adversary: the bytes that reached both arms are the client's own, sent as they came. So
it is XXH3-128 (``xxhash``), 6x cheaper than BLAKE3 on this path (16 vs 90-108 us per
250 KB URL; ``benchmarks/router_overhead.md``). Records written before carry ``blake3:``
or ``sha256:``; ``url_hash`` recomputes any of the three, so readers check old runs too;
``record_hash`` is the router's.
"""

from __future__ import annotations

import hashlib

import blake3
import xxhash

SCHEME = "xxh3-128"  # what the router writes now


def _xxh3_128(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def _blake3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_DIGESTS = {SCHEME: _xxh3_128, "blake3": _blake3, "sha256": _sha256}


def record_hash(url: str) -> str:
    """``xxh3-128:<hex digest>`` of ``url`` (its UTF-8 bytes): what the router records."""
    return f"{SCHEME}:{_xxh3_128(url.encode())}"


def url_hash(url: str, scheme: str) -> str | None:
    """``<scheme>:<hex digest>`` of ``url`` under any scheme records have carried; None for
    an unknown scheme."""
    digest = _DIGESTS.get(scheme)
    return None if digest is None else f"{scheme}:{digest(url.encode())}"
