"""Mooncake-style traces: requests whose prompts share exactly the blocks their ``hash_ids`` share.

A line is ``{"timestamp": MS, "input_length": N, "output_length": M, "hash_ids": [H, ...]}``
(the FAST'25 Mooncake traces; ``vllm bench serve``'s and AIPerf's ``mooncake`` data sets). Each
hash id names one block of ``block_size`` tokens (512 by default, as both peers); the last block
holds the rest, ``N - (len(hash_ids) - 1) * block_size`` tokens, which must be 1 to
``block_size`` (AIPerf's rule). A block's text is made from its hash id alone: words drawn by a
hash of (the file's ``seed``, hash id), each word one token, so two lines naming
the same hash id send the same text there, different ids differ, and two runs of the same trace
send the same bytes. A partial last block is the start of that hash id's full block.

Token exactness: a block is ``" w1 w2 ..."``, one vocabulary word per token. The built-in words
are single tokens of the embedded tiny model's byte-level BPE (``arms.tiny_model``; a unit test
trains it and checks a block is exactly ``block_size`` tokens) and common English words most
BPE vocabularies keep whole, so other models get close to, not exactly, ``block_size`` tokens.
``trace.tokenizer`` (a ``tokenizer.json`` or a model directory holding one) makes the words
those that the served model's own tokenizer keeps as one token: exact for any tokenizer whose
pre-tokenizer splits at spaces (checked on a sample block; refused otherwise).

Images (``trace.images_per_block``): that many seeded PNGs after each full block's text, made
from the block's hash id, so a shared block carries the same images on every line naming it.
Every request is tagged ``shared-prefix`` ``yes`` when its first block's hash id was sent by an
earlier line of the walk, else ``no``. Arrivals are the ``timestamp`` milliseconds; under
``replay: recorded`` a line needs one, never earlier than the line before it.
"""

from __future__ import annotations

import functools
import hashlib
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from abserve.traffic.sources.imported import Imported, LineError

FORMAT = "mooncake"
DEFAULT_BLOCK_SIZE = 512
FIELDS = ("input_length", "output_length", "hash_ids")
#: single tokens of the embedded tiny model's tokenizer (with their leading space); sorted
WORDS: tuple[str, ...] = tuple("""
above across add again air all along and answer any are as at back bag bake bar bean bells bird
blue book books bread brown but buying by call came car cars cat city cloud compare cook corn
cup degrees describe deserts do does dog door down dry each egg eggs eight eleven every face far
fed fell fence field first flour flow fly for four fox frame free from full garden gate give
going good green grey hand has he help higher hills his honest hour house hundred in is island
it its last later lazy library light long look looked lying man map mat mean median milk mind
minutes moon more morning names near night nine not of old on once one onions open or other out
outputs over pears photo picture pig pin plan question ran read red report request run same sat
see sent she shop shore short shown shows six sky slow so street sugar sum sun swans table tells
ten test than that the their then there they third thirty this thousand three time to total
town train tree two under units up wall was well went were wheat wind windows wing winter with
woke woman wood write yellow you your""".split())
MAX_TOKENIZER_WORDS = 4096
SAMPLE_WORDS = 256  # the block checked against a given tokenizer


class TraceOptions(BaseModel):
    """How a Mooncake-style trace's hash blocks become prompts (``file.trace``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    block_size: int = Field(DEFAULT_BLOCK_SIZE, ge=1, le=65536, description="tokens per hash id")
    images_per_block: int = Field(0, ge=0, le=64, description="seeded images after each full block")
    image_px: int = Field(28, ge=1, le=4096, description="their width and height in pixels")
    tokenizer: str | None = Field(None, description="the served model's tokenizer.json (or its "
                                  "directory): words that are exactly one of its tokens")


class TraceSource(Protocol):
    """What a walk reads of the file source (``spec.FileSource`` has it all)."""

    @property
    def trace(self) -> TraceOptions: ...
    @property
    def seed(self) -> int: ...
    @property
    def replay(self) -> str: ...
    @property
    def max_context(self) -> int | None: ...


def looks_like(value: dict[str, Any]) -> bool:
    """Whether an item is a Mooncake trace line (auto-detection)."""
    return "hash_ids" in value and "input_length" in value


class SeenIds:
    """Hash ids sent so far, in memory that stays flat for traces numbering their blocks in
    order of first use (Mooncake's convention: all ids below ``below`` were seen, and a set
    holds only those seen above it)."""

    def __init__(self) -> None:
        self.below = 0
        self.above: set[int] = set()

    def __contains__(self, hash_id: int) -> bool:
        return hash_id < self.below or hash_id in self.above

    def add(self, hash_id: int) -> None:
        if hash_id < self.below:
            return
        self.above.add(hash_id)
        while self.below in self.above:
            self.above.discard(self.below)
            self.below += 1


class TraceWalk:
    """One walk through a trace, in file order: what earlier lines sent, their last arrival.
    ``keep`` says whether the sample keeps a line: a line it leaves out is not read (and not
    remembered as sent)."""

    def __init__(self, keep: Callable[[int], bool] = lambda _line: True) -> None:
        self.keep = keep
        self.seen = SeenIds()
        self.last_ms: float | None = None

    def read(self, value: Any, line: int, src: TraceSource) -> list[Imported]:
        """The line's request, or none when the sample leaves the line out."""
        return [self.parse(value, line, src)] if self.keep(line) else []

    def parse(self, value: Any, line: int, src: TraceSource) -> Imported:
        """One trace line as a chat/completions request (``LineError`` when it cannot be)."""
        if not isinstance(value, dict):
            raise LineError("expected a JSON object")
        missing = [key for key in FIELDS if key not in value]
        if missing:
            raise LineError(f"a trace line needs {', '.join(FIELDS)}; missing {', '.join(missing)}")
        opts = src.trace
        n_in, n_out = _count(value, "input_length"), _count(value, "output_length")
        ids = _hash_ids(value["hash_ids"])
        last = n_in - (len(ids) - 1) * opts.block_size
        if not 0 < last <= opts.block_size:
            raise LineError(f"input_length {n_in} does not fit {len(ids)} hash blocks of "
                            f"{opts.block_size} tokens (the last block would hold {last}; "
                            "trace.block_size / --block-size sets the block size)")
        _check_context(len(ids), n_in, n_out, opts.block_size, src.max_context)
        arrival = self._arrival(value, src)
        shared = ids[0] in self.seen
        for hash_id in ids:
            self.seen.add(hash_id)
        body = {"messages": [{"role": "user", "content": _content(ids, last, src)}],
                "max_tokens": n_out, "temperature": 0.0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        return Imported(line, "chat/completions", body, arrival, {}, FORMAT, shared_prefix=shared)

    def _arrival(self, value: dict[str, Any], src: TraceSource) -> float | None:
        stamp = value.get("timestamp")
        if stamp is None:
            if src.replay == "recorded":
                raise LineError("no 'timestamp' (milliseconds) to replay at (replay: closed "
                                "sends a trace without times)")
            return None
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or stamp < 0:
            raise LineError("'timestamp' must be milliseconds >= 0")
        if src.replay == "recorded" and self.last_ms is not None and stamp < self.last_ms:
            raise LineError(f"'timestamp' {stamp} ms is before the line before it ({self.last_ms} "
                            "ms): a trace is replayed in file order (sort it by timestamp)")
        self.last_ms = stamp
        return stamp / 1000.0


def block_text(seed: int, hash_id: int, tokens: int, opts: TraceOptions) -> str:
    """The text of hash block ``hash_id`` cut to its first ``tokens`` words (one each)."""
    text, words = _block(seed, hash_id, opts.block_size, opts.tokenizer)
    return text if tokens == opts.block_size else " " + " ".join(words[:tokens])


def _content(ids: list[int], last: int, src: TraceSource) -> list[dict[str, Any]]:
    opts = src.trace
    parts: list[dict[str, Any]] = []
    text: list[str] = []
    for k, hash_id in enumerate(ids):
        full = k < len(ids) - 1 or last == opts.block_size
        text.append(block_text(src.seed, hash_id, opts.block_size if full else last, opts))
        if full and opts.images_per_block:
            parts.append({"type": "text", "text": "".join(text)})
            text = []
            parts += [{"type": "image_url", "image_url": {"url": url}}
                      for url in _block_images(src.seed, hash_id, opts.images_per_block,
                                               opts.image_px)]
    if text:
        parts.append({"type": "text", "text": "".join(text)})
    return parts


def _check_context(blocks: int, n_in: int, n_out: int, block_size: int,
                   context: int | None) -> None:
    if context is None:
        return
    if blocks * block_size > context:
        raise LineError(f"{blocks} hash blocks of {block_size} tokens ({blocks * block_size}) are "
                        f"longer than the model's context ({context} tokens)")
    if n_in + n_out > context:
        raise LineError(f"input_length {n_in} + output_length {n_out} is over the model's "
                        f"context ({context} tokens)")


def _count(value: dict[str, Any], key: str) -> int:
    n = value[key]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise LineError(f"'{key}' must be a positive integer")
    return n


def _hash_ids(raw: Any) -> list[int]:
    if not isinstance(raw, list) or not raw:
        raise LineError("'hash_ids' must be a non-empty list of block ids")
    if any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in raw):
        raise LineError("'hash_ids' must hold integers >= 0")
    return raw


def _seed(*parts: object) -> int:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@functools.lru_cache(maxsize=1024)  # 1,024 blocks: about 7 MiB at 512 tokens
def _block(seed: int, hash_id: int, block_size: int,
           tokenizer: str | None) -> tuple[str, tuple[str, ...]]:
    """A block's full text and its words: word ``k`` is picked by 16 bits of a SHAKE-256 stream
    keyed by (seed, hash id), little-endian (the same on every machine, and fast)."""
    table = _pick_table(tokenizer)
    key = f"trace-block:{seed}:{hash_id}".encode()
    picks = struct.unpack(f"<{block_size}H", hashlib.shake_256(key).digest(2 * block_size))
    words = tuple(map(table.__getitem__, picks))
    return " " + " ".join(words), words


@functools.lru_cache(maxsize=4)
def _pick_table(tokenizer: str | None) -> tuple[str, ...]:
    """The word each 16-bit pick names: the vocabulary repeated (pick modulo its length)."""
    vocab = vocabulary(tokenizer)
    return tuple(vocab[k % len(vocab)] for k in range(1 << 16))


@functools.lru_cache(maxsize=512)
def _block_images(seed: int, hash_id: int, count: int, px: int) -> tuple[str, ...]:
    from abserve.traffic.images import make_image

    return tuple(make_image(_seed("trace-image", seed, hash_id, k) % 2**63, px, px, "png").data_url
                 for k in range(count))


@functools.lru_cache(maxsize=4)
def vocabulary(tokenizer: str | None) -> tuple[str, ...]:
    """The words blocks are made of: the built-in ones, or a tokenizer's one-token words."""
    if tokenizer is None:
        return WORDS
    path = Path(tokenizer)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise LineError("trace.tokenizer needs the 'tokenizers' package (vLLM installs it)") from None
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception:  # the library raises its own exception types
        raise LineError(f"trace.tokenizer: {path} is not a readable tokenizer.json") from None
    return _one_token_words(tok, path)


def _one_token_words(tok: Any, path: Path) -> tuple[str, ...]:
    words: set[str] = set()
    for token_id in range(tok.get_vocab_size()):
        text = tok.decode([token_id])
        word = text[1:]
        if text[:1] == " " and 2 <= len(word) <= 12 and word.isascii() and word.isalpha() \
                and word.islower():
            words.add(word)
    kept = tuple(w for w in sorted(words)
                 if len(tok.encode(" " + w, add_special_tokens=False).ids) == 1)
    kept = kept[:MAX_TOKENIZER_WORDS]
    sample = random.Random(0).choices(kept, k=SAMPLE_WORDS) if len(kept) >= 16 else []
    if not sample or len(tok.encode(" " + " ".join(sample), add_special_tokens=False).ids) \
            != SAMPLE_WORDS:
        raise LineError(f"trace.tokenizer: {path} does not keep space-separated words apart "
                        "as single tokens; leave trace.tokenizer out (approximate blocks)")
    return kept
