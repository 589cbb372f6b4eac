"""The request corpus: seeded, byte-identical, sharded, written and replayed as JSONL.

Entry ``i`` of a corpus is a pure function of (profile, seed, i, model) — and, for
``chunk-boundary``, of the server's tokenization — so any worker can build exactly its own
shard (indices ``i % shards == shard``) and the union of all shards is the corpus built by one
process. Bodies are serialized once, here, before any clock starts; sending is copying bytes.
A profile with a ``session`` section builds conversations (``build_turn``): a worker builds
whole sessions (session ``s`` on worker ``s % shards``), each turn with its whole history.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from abserve.model.records import TAG_HEADER_PREFIX
from abserve.traffic.calibrate import Span, Tokenizer, find_image_token, place_spans
from abserve.traffic.images import EncodedImage, make_image
from abserve.traffic.profiles import TrafficProfile
from abserve.traffic.turns import SESSION_TAGS, SHARED_TAG, Turn

CHAT_PATH = "/v1/chat/completions"
API_KEY_ENV = "ABSERVE_API_KEY"  # bearer key of the router (or server) under load; never logged
PAD_WORD = "a"  # one token in any tokenizer we know; calibration verifies it anyway
# Everyday words; the tiny model's tokenizer was trained on text containing all of them.
WORDS = tuple(
    "the morning light came slowly over hills and small town woke to sound of bells a baker "
    "opened door his shop set out bread rolls cakes on wooden table children ran along river "
    "with red kite laughing as wind pulled it higher old woman sat bench near fountain fed "
    "pigeons from paper bag market filled people buying apples pears onions carrots fish "
    "cheese flowers dog barked at cat wall looked down yawned went back sleep describe "
    "picture in detail what do you see this image how many objects are there please each "
    "briefly then compare first last photo shows blue car parked beside green tree under "
    "cloudy grey sky second man yellow coat is walking across bridge rain third contains "
    "three cups teapot plate cookies spoon look chart sales rose units"
.split())


@dataclass(frozen=True)
class CorpusEntry:
    """One request, ready to send: the body bytes and the tags that go in headers."""

    index: int
    body: bytes
    tags: dict[str, str]
    n_images: int
    image_bytes: int
    image_hashes: tuple[str, ...]
    token_estimate: int
    spans: tuple[Span, ...] = field(default=())
    path: str = CHAT_PATH  # the endpoint (an imported completions request: /v1/completions)
    turn: Turn | None = None  # its place in a session (``abserve.traffic.turns``)

    def headers(self, run_id: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        """HTTP headers for sending this entry in run ``run_id``, plus ``extra`` run tags
        (``{"block": "0"}`` becomes ``x-abserve-block: 0``; see ``parse_tags``)."""
        run_tags = {f"{TAG_HEADER_PREFIX}{key}": value for key, value in (extra or {}).items()}
        return {"content-type": "application/json", f"{TAG_HEADER_PREFIX}run-id": run_id,
                **run_tags, **self.tags}


RESERVED_TAGS = frozenset({"run-id", "request-id", "profile", "items", "token-estimate",
                           "corpus-index", "seed", "source-line", "sampling", *SESSION_TAGS})
_TAG_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_TAG_VALUE = re.compile(r"^[A-Za-z0-9 .,:+_/=-]{0,200}$")


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    """Validate run tags (the load generator's ``--abserve-tags``) and return them.

    Keys are short lowercase header words that do not shadow the corpus's own tags;
    values are short plain text, so a tag can never inject a header or a separator.
    """
    for key, value in tags.items():
        if not _TAG_KEY.match(key):
            raise ValueError(f"tag key {key!r}: use lowercase letters, digits and '-'")
        if key in RESERVED_TAGS:
            raise ValueError(f"tag key {key!r} is reserved (set by the corpus or the router)")
        if not _TAG_VALUE.match(value):
            raise ValueError(f"tag {key}={value!r}: value must be short plain text")
    return dict(tags)


def format_tags(tags: dict[str, str]) -> str:
    """``{"block": "0", "placement": "a:0,b:1"}`` -> ``block=0;placement=a:0,b:1``."""
    return ";".join(f"{key}={value}" for key, value in check_tags(tags).items())


def parse_tags(text: str) -> dict[str, str]:
    """The inverse of ``format_tags``; an empty string gives no tags."""
    tags: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"tag {pair!r}: expected key=value")
        tags[key.strip()] = value.strip()
    return check_tags(tags)


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from any parts, stable across processes (unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shard_indices(n: int, shard: int = 0, shards: int = 1) -> range:
    """The corpus indices a worker owns; shards are disjoint and cover ``range(n)``."""
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard {shard} of {shards} is not a valid shard")
    return range(shard, n, shards)


def build_corpus(profile: TrafficProfile, seed: int, n: int, model: str, *, shard: int = 0,
                 shards: int = 1, tokenizer: Tokenizer | None = None) -> list[CorpusEntry]:
    """Build this shard's entries of an ``n``-request corpus."""
    if n < 1:
        raise ValueError("a corpus needs at least one request")
    if profile.chunk_boundary is not None and tokenizer is None:
        raise ValueError(f"profile {profile.name!r} places spans on chunk boundaries and needs "
                         "the server's /tokenize (pass a tokenizer)")
    if profile.session is not None:
        turns = profile.session.turns
        return [build_turn(profile, seed, i, model) for i in range(n)
                if (i // turns) % shards == shard]
    image_token = None
    if tokenizer is not None and profile.chunk_boundary is not None:
        probe = _image_for(profile, seed, -1, 0, random.Random(0))
        image_token = find_image_token(tokenizer, probe.data_url)
    return [build_entry(profile, seed, i, model, tokenizer, image_token)
            for i in shard_indices(n, shard, shards)]


def build_entry(profile: TrafficProfile, seed: int, index: int, model: str,
                tokenizer: Tokenizer | None = None, image_token: int | None = None) -> CorpusEntry:
    """Entry ``index`` of the corpus for (profile, seed)."""
    rng = random.Random(derive_seed(seed, profile.name, index))
    n_images = rng.randint(*profile.images.count)
    images = [_image_for(profile, seed, index, j, rng) for j in range(n_images)]
    n_words = rng.randint(*profile.text.words)
    words = _words(profile, seed, rng, n_words)
    spans: tuple[Span, ...] = ()
    if profile.chunk_boundary is not None and tokenizer is not None and image_token is not None:
        content, spans, n_tokens = _boundary_content(profile, seed, index, images, tokenizer,
                                                     image_token)
        estimate = n_tokens
    else:
        content = _layout(profile, images, words)
        estimate = len(words) + n_images * profile.tokens_per_image_estimate
    body = _body(profile, model, [{"role": "user", "content": content}],
                 derive_seed(seed, profile.name, index, "sampling"))
    tags = {
        f"{TAG_HEADER_PREFIX}profile": profile.name,
        f"{TAG_HEADER_PREFIX}items": str(n_images),
        f"{TAG_HEADER_PREFIX}token-estimate": str(estimate),
        f"{TAG_HEADER_PREFIX}corpus-index": str(index),
        f"{TAG_HEADER_PREFIX}seed": str(seed),
    }
    return CorpusEntry(index, body, tags, n_images, sum(im.n_bytes for im in images),
                       tuple(im.sha256 for im in images), estimate, spans)


def _image_for(profile: TrafficProfile, seed: int, index: int, j: int,
               rng: random.Random) -> EncodedImage:
    spec = profile.images
    if spec.pool_size is not None:
        slot = j if spec.pool_order == "fixed" else rng.randrange(spec.pool_size)
        return _pool_image(profile, seed, slot)
    width, height = rng.choice(spec.sizes)
    fmt = rng.choice(spec.formats)
    return make_image(derive_seed(seed, profile.name, index, "image", j), width, height, fmt,
                      spec.jpeg_quality)


def _pool_image(profile: TrafficProfile, seed: int, slot: int) -> EncodedImage:
    spec = profile.images
    rng = random.Random(derive_seed(seed, profile.name, "pool", slot))
    width, height = rng.choice(spec.sizes)
    return _cached_image(derive_seed(seed, profile.name, "pool-image", slot), width, height,
                         rng.choice(spec.formats), spec.jpeg_quality)


@lru_cache(maxsize=4096)
def _cached_image(seed: int, width: int, height: int, fmt: str, quality: int) -> EncodedImage:
    return make_image(seed, width, height, "png" if fmt == "png" else "jpeg", quality)


def _words(profile: TrafficProfile, seed: int, rng: random.Random, n: int) -> list[str]:
    shared = min(profile.text.shared_prefix_words, n)
    prefix_rng = random.Random(derive_seed(seed, profile.name, "prefix"))
    prefix = [prefix_rng.choice(WORDS) for _ in range(shared)]
    return prefix + [rng.choice(WORDS) for _ in range(n - shared)]


def _text(words: Iterable[str]) -> dict[str, Any]:
    return {"type": "text", "text": " ".join(words)}


def _image_part(image: EncodedImage) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image.data_url}}


def _layout(profile: TrafficProfile, images: list[EncodedImage],
            words: list[str]) -> list[dict[str, Any]]:
    image_parts = [_image_part(im) for im in images]
    if profile.layout == "images_first":
        parts = [*image_parts, _text(words)]
    elif profile.layout == "text_first":
        parts = [_text(words), *image_parts]
    else:
        pieces = len(images) + 1
        cuts = [round(k * len(words) / pieces) for k in range(pieces + 1)]
        parts = []
        for k in range(pieces):
            parts.append(_text(words[cuts[k]:cuts[k + 1]]))
            if k < len(images):
                parts.append(image_parts[k])
    return [p for p in parts if p["type"] != "text" or p["text"]]


def _boundary_content(profile: TrafficProfile, seed: int, index: int,
                      images: list[EncodedImage], tokenizer: Tokenizer,
                      image_token: int) -> tuple[list[dict[str, Any]], tuple[Span, ...], int]:
    spec = profile.chunk_boundary
    if spec is None:
        raise ValueError(f"profile {profile.name!r} has no chunk_boundary section")
    streams = [random.Random(derive_seed(seed, profile.name, index, "filler", k))
               for k in range(len(images) + 1)]
    pools = [[s.choice(WORDS) for _ in range(64)] for s in streams]

    def filler(k: int, n: int) -> list[str]:
        pool = pools[k]
        return [pool[i % len(pool)] for i in range(n)]

    def render_content(fillers: list[tuple[int, int]]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for k, image in enumerate(images):
            words, pads = fillers[k]
            parts.append(_text([*filler(k, words), *[PAD_WORD] * pads]))
            parts.append(_image_part(image))
        parts.append(_text(filler(len(images), spec.tail_words)))
        return [p for p in parts if p["type"] != "text" or p["text"]]

    placements = [spec.placements[(index + k) % len(spec.placements)] for k in range(len(images))]
    fillers, spans, n_tokens = place_spans(
        lambda f: [{"role": "user", "content": render_content(f)}], len(images), tokenizer,
        image_token, spec, placements, reserve=profile.max_tokens)
    return render_content(fillers), tuple(spans), n_tokens


def build_turn(profile: TrafficProfile, seed: int, index: int, model: str) -> CorpusEntry:
    """Entry ``index`` of a session profile: turn ``index % turns + 1`` of session
    ``index // turns``, with the system prompt and the history before it (``SessionSpec``)."""
    spec = profile.session
    if spec is None:
        raise ValueError(f"profile {profile.name!r} has no session section")
    session, k = divmod(index, spec.turns)
    rng = random.Random(derive_seed(seed, profile.name, "session", session))
    n_images = rng.randint(*profile.images.count)
    images = [_image_for(profile, seed, -2 - session, j, rng) for j in range(n_images)]
    messages: list[dict[str, Any]] = []
    if spec.system_words:
        system = random.Random(derive_seed(seed, profile.name, "system"))
        messages.append({"role": "system",
                         "content": " ".join(system.choice(WORDS) for _ in range(spec.system_words))})
    words = spec.system_words
    for u in range(k + 1):
        turn_rng = random.Random(derive_seed(seed, profile.name, "session", session, "turn", u))
        text = [turn_rng.choice(WORDS) for _ in range(turn_rng.randint(*profile.text.words))]
        mine = [im for j, im in enumerate(images) if j * spec.turns // n_images == u]
        messages.append({"role": "user", "content": _layout(profile, mine, text)})
        words += len(text)
        if u < k:
            reply = [turn_rng.choice(WORDS) for _ in range(spec.reply_words)]
            messages.append({"role": "assistant", "content": " ".join(reply)})
            words += len(reply)
    sent = [im for j, im in enumerate(images) if j * spec.turns // n_images <= k]
    estimate = words + len(sent) * profile.tokens_per_image_estimate
    turn = Turn(f"s{session}-{seed}", k + 1, spec.think_s if k else 0.0,
                shared=k > 0 or (spec.system_words > 0 and session > 0))
    body = _body(profile, model, messages, derive_seed(seed, profile.name, index, "sampling"))
    tags = {f"{TAG_HEADER_PREFIX}profile": profile.name, f"{TAG_HEADER_PREFIX}items": str(len(sent)),
            f"{TAG_HEADER_PREFIX}token-estimate": str(estimate),
            f"{TAG_HEADER_PREFIX}corpus-index": str(index), f"{TAG_HEADER_PREFIX}seed": str(seed),
            **turn.headers()}
    return CorpusEntry(index, body, tags, len(sent), sum(im.n_bytes for im in sent),
                       tuple(im.sha256 for im in sent), estimate, turn=turn)


def _body(profile: TrafficProfile, model: str, messages: list[dict[str, Any]],
          sampling_seed: int) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": profile.max_tokens,
        "temperature": profile.temperature,
        "stream": profile.stream,
    }
    if profile.stream:
        body["stream_options"] = {"include_usage": True}
    if profile.ignore_eos:
        body["ignore_eos"] = True
    if profile.temperature > 0:
        body["seed"] = sampling_seed % (2**31)
    return orjson.dumps(body)


def write_jsonl(entries: Iterable[CorpusEntry], path: Path) -> int:
    """Write entries one per line (body embedded as JSON); returns the count."""
    n = 0
    with path.open("wb") as fh:
        for e in entries:
            record = {"index": e.index, "tags": e.tags, "n_images": e.n_images,
                      "image_bytes": e.image_bytes, "image_hashes": list(e.image_hashes),
                      "token_estimate": e.token_estimate,
                      "spans": [[s.offset, s.length, s.boundary, s.placement] for s in e.spans],
                      "body_sha256": hashlib.sha256(e.body).hexdigest(),
                      "body": orjson.Fragment(e.body)}
            if e.turn is not None:  # a session's turn (read back by ``sources.corpus_jsonl``)
                record |= {"session_id": e.turn.session, "turn": e.turn.turn,
                           "think_s": e.turn.think_s}
            fh.write(orjson.dumps(record) + b"\n")
            n += 1
    return n


def read_jsonl(path: Path, shard: int = 0, shards: int = 1) -> list[CorpusEntry]:
    """Replay a written corpus (this shard's part: its requests, or whole sessions by their
    order in the file), checking every body's hash."""
    out: list[CorpusEntry] = []
    sessions, last = -1, None
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rec = orjson.loads(line)
            turn = _turn_of(rec)
            if turn is not None and turn.session != last:
                sessions, last = sessions + 1, turn.session
            if (sessions if turn is not None else rec["index"]) % shards != shard:
                continue
            body = orjson.dumps(rec["body"])
            if hashlib.sha256(body).hexdigest() != rec["body_sha256"]:
                raise ValueError(f"{path}:{lineno}: body does not match its recorded hash")
            spans = tuple(Span(o, n, b, p) for o, n, b, p in rec["spans"])
            out.append(CorpusEntry(rec["index"], body, rec["tags"], rec["n_images"],
                                   rec["image_bytes"], tuple(rec["image_hashes"]),
                                   rec["token_estimate"], spans, turn=turn))
    return out


def _turn_of(rec: dict[str, Any]) -> Turn | None:
    if "session_id" not in rec:
        return None
    shared = rec["tags"].get(f"{TAG_HEADER_PREFIX}{SHARED_TAG}") == "yes"
    return Turn(str(rec["session_id"]), int(rec["turn"]), float(rec.get("think_s", 0.0)), shared)
