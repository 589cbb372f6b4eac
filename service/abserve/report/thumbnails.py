"""Thumbnails and prompt positions of a request's images, rebuilt from abserve's own corpus.

The store keeps only a hash of each image URL (``abserve.base.url_hash``), never the image.
A request that abserve's load generator sent carries the tags that rebuild it exactly (profile,
seed, corpus-index; the run's provenance holds the load plan's profile overrides): a corpus
entry is a pure function of them (``abserve.traffic.corpus.build_entry``). The rebuilt images are
shown only when every rebuilt URL hashes, in order, to the hash the router recorded; otherwise
the report says why none is shown. Profiles placed on chunk boundaries need the server's
tokenizer and are not rebuilt; requests from other clients carry no corpus tags.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any

import orjson

from abserve.base.url_hash import url_hash
from abserve.model.provenance import RunProvenance
from abserve.model.records import Exchange

MAX_THUMBS = 12  # per request: the first ones in prompt order
SIZE = 64  # pixels, longest side


@dataclass(frozen=True)
class Thumb:
    src: str  # data:image/jpeg;base64 thumbnail
    alt: str
    position: str  # where the image sits in the prompt


@dataclass(frozen=True)
class Rebuilt:
    """The images of one request as rebuilt, or why they could not be."""

    note: str
    thumbs: list[Thumb] = field(default_factory=list)
    total: int = 0


def _overrides(provenance: RunProvenance, profile: str) -> dict[str, Any]:
    for item in provenance.load_plan:
        if item.get("profile") == profile and isinstance(item.get("set"), dict):
            return dict(item["set"])
    return {}


def _content(ex: Exchange, provenance: RunProvenance) -> list[dict[str, Any]] | str:
    """The rebuilt request's content parts, or why there are none."""
    from abserve.traffic.corpus import build_entry
    from abserve.traffic.profiles import ProfileError, load_profile

    tags = ex.tags
    if not all(k in tags for k in ("profile", "seed", "corpus-index")):
        return "the request carries no corpus tags (not sent by abserve's load generator)"
    try:
        profile = load_profile(tags["profile"], _overrides(provenance, tags["profile"]))
        seed, index = int(tags["seed"]), int(tags["corpus-index"])
    except (ProfileError, ValueError) as exc:
        return f"the corpus cannot be rebuilt: {exc}"
    if profile.chunk_boundary is not None:
        return f"profile {profile.name} places images by the server's tokenizer; not rebuilt offline"
    body = orjson.loads(build_entry(profile, seed, index, "report").body)
    content = body["messages"][0]["content"]
    return content if isinstance(content, list) else "the rebuilt request has no content parts"


def _thumb(url: str) -> str:
    from PIL import Image

    from abserve.traffic.images import decode_data_url

    with Image.open(io.BytesIO(decode_data_url(url))) as img:
        small = img.convert("RGB")
        small.thumbnail((SIZE, SIZE))
        out = io.BytesIO()
        small.save(out, format="JPEG", quality=70)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()


def rebuild(ex: Exchange, provenance: RunProvenance) -> Rebuilt:
    """The first ``MAX_THUMBS`` images of ``ex`` as thumbnails with their prompt positions.

    Optional evidence never breaks the report: any failure is said in one line instead."""
    try:
        return _rebuild(ex, provenance)
    except Exception as exc:  # a corpus or image that cannot be rebuilt is reported, not raised
        return Rebuilt(f"thumbnails not shown: the rebuild failed ({type(exc).__name__}: {exc})")


def _rebuild(ex: Exchange, provenance: RunProvenance) -> Rebuilt:
    if not ex.image_hashes:
        return Rebuilt("no image hash recorded")
    content = _content(ex, provenance)
    if isinstance(content, str):
        return Rebuilt(f"thumbnails not shown: {content}")
    images: list[tuple[str, str]] = []
    words = 0
    for i, part in enumerate(content):
        if part.get("type") == "text":
            words += len(str(part.get("text", "")).split())
        elif part.get("type") == "image_url":
            images.append((part["image_url"]["url"], f"part {i + 1} of {len(content)}, after {words} words"))
    scheme = ex.image_hashes[0].partition(":")[0]
    if [url_hash(url, scheme) for url, _ in images] != ex.image_hashes:
        return Rebuilt("thumbnails not shown: the rebuilt images do not hash to the recorded ones "
                       "(a changed profile or corpus)")
    thumbs = [Thumb(_thumb(url), f"image {k + 1} of {len(images)}, {pos}", pos)
              for k, (url, pos) in enumerate(images[:MAX_THUMBS])]
    shown = "" if len(images) <= MAX_THUMBS else f"; the first {MAX_THUMBS} shown"
    return Rebuilt(f"rebuilt from the corpus (profile {ex.tags['profile']}, seed {ex.tags['seed']}, "
                   f"index {ex.tags['corpus-index']}); all {len(images)} match the recorded "
                   f"hashes{shown}", thumbs, len(images))
