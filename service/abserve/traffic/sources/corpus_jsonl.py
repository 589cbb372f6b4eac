"""abserve's own corpus JSON Lines (``abserve corpus --out FILE``; ``traffic.corpus.write_jsonl``).

Each line is ``{"index", "tags", "n_images", "image_bytes", "image_hashes", "token_estimate",
"spans", "body_sha256", "body"}``: the chat/completions body exactly as abserve built it and
the SHA-256 of its bytes, checked here so an edited corpus is refused rather than sent. The
corpus's own tags (profile, items, seed...) are replaced by the file source's, but its
profile, seed and index are kept as ``corpus-profile`` / ``corpus-seed`` / ``corpus-line``
tags. Optional ``timestamp`` / ``offset`` keys give arrivals like in the other formats, and
``session_id`` / ``turn`` / ``think_s`` (written for a profile's sessions) a session's turns.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from abserve.model.records import TAG_HEADER_PREFIX
from abserve.traffic.sources.imported import Imported, LineError, arrival_of, session_of

KEPT = {"profile": "corpus-profile", "seed": "corpus-seed", "corpus-index": "corpus-line"}


def looks_like(value: dict[str, Any]) -> bool:
    return "body_sha256" in value and "body" in value


def parse(value: Any, line: int) -> Imported:
    """One line of an abserve corpus."""
    if not isinstance(value, dict) or not isinstance(value.get("body"), dict):
        raise LineError("a corpus line needs a 'body' object")
    body = value["body"]
    if hashlib.sha256(orjson.dumps(body)).hexdigest() != value.get("body_sha256"):
        raise LineError("body does not match its recorded body_sha256 (an edited corpus)")
    tags: dict[str, str] = {}
    raw = value.get("tags")
    if isinstance(raw, dict):
        for header, text in raw.items():
            key = str(header).removeprefix(TAG_HEADER_PREFIX)
            if key in KEPT:
                tags[KEPT[key]] = str(text)
    return Imported(line, "chat/completions", dict(body), arrival_of(value), tags, "corpus",
                    session=session_of(value))
