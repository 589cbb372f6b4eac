"""Place image spans on chunk boundaries, measured with the server's own tokenizer.

vLLM's ``POST /tokenize`` accepts chat ``messages`` (the same content parts a chat request
carries) and answers ``{"count", "max_model_len", "tokens"}`` with every image already
expanded to its placeholder tokens. So instead of guessing how many tokens a word, a chat
template or an image costs, the corpus builder renders a request, asks the server where its
image spans landed, and moves the text in front of each image until every span starts at,
ends at, or straddles its target multiple of ``max_num_batched_tokens``.

The image placeholder id is found by difference: the id that appears most often in a probe
with one image and not at all without it. Spans are maximal runs of that id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from abserve.traffic.profiles import ChunkBoundarySpec, Placement

Messages = list[dict[str, Any]]


class CalibrationError(RuntimeError):
    """The server's tokenization could not be used to place the spans as asked."""


@dataclass(frozen=True)
class Tokenized:
    """What ``/tokenize`` said about one rendering."""

    tokens: list[int]
    max_model_len: int


class Tokenizer(Protocol):
    def __call__(self, messages: Messages) -> Tokenized: ...


@dataclass(frozen=True)
class Span:
    """Where one image's placeholder tokens sit in the prompt, and where it was meant to sit."""

    offset: int
    length: int
    boundary: int = 0  # the multiple of max_num_batched_tokens it was placed against
    placement: Placement | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length


class HttpTokenizer:
    """Calls a vLLM-compatible ``POST {base_url}/tokenize`` with chat messages."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 60.0) -> None:
        self.url = base_url.rstrip("/") + "/tokenize"
        self.model = model
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s))

    def __call__(self, messages: Messages) -> Tokenized:
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        try:
            resp = self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise CalibrationError(f"/tokenize at {self.url} failed: {type(exc).__name__}") from exc
        if resp.status_code != 200:
            raise CalibrationError(f"/tokenize at {self.url} answered HTTP {resp.status_code}")
        data = resp.json()
        try:
            return Tokenized([int(t) for t in data["tokens"]], int(data["max_model_len"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"/tokenize at {self.url}: unexpected answer shape") from exc

    def close(self) -> None:
        self._client.close()


def find_image_token(tokenizer: Tokenizer, image_url: str) -> int:
    """The placeholder id an image expands to, found by tokenizing with and without one."""
    text = {"type": "text", "text": "look"}
    image = {"type": "image_url", "image_url": {"url": image_url}}
    with_image = Counter(tokenizer([{"role": "user", "content": [text, image]}]).tokens)
    without = Counter(tokenizer([{"role": "user", "content": [text]}]).tokens)
    new = {tok: n for tok, n in with_image.items() if tok not in without}
    if not new:
        raise CalibrationError("/tokenize shows no tokens for an image; is this a vision model?")
    return max(new, key=lambda tok: (new[tok], -tok))


def image_spans(tokens: list[int], image_token: int) -> list[Span]:
    """Maximal runs of the image placeholder id."""
    spans: list[Span] = []
    start = None
    for i, tok in enumerate([*tokens, None]):
        if tok == image_token and start is None:
            start = i
        elif tok != image_token and start is not None:
            spans.append(Span(start, i - start))
            start = None
    return spans


def target_offset(boundary: int, length: int, placement: Placement) -> int:
    """Where a span of ``length`` must start to start at, end at, or straddle ``boundary``."""
    if placement == "start":
        return boundary
    if placement == "end":
        return boundary - length
    if length < 2:
        raise CalibrationError("an image of one token cannot straddle a boundary")
    return boundary - length // 2


def place_spans(render: Callable[[list[tuple[int, int]]], Messages], n_images: int,
                tokenizer: Tokenizer, image_token: int, spec: ChunkBoundarySpec,
                placements: list[Placement], reserve: int
                ) -> tuple[list[tuple[int, int]], list[Span], int]:
    """Find the text before each image that puts the spans on their targets.

    ``render(fillers)`` gives the messages with ``fillers[i] = (words, pads)`` before image
    ``i``: ``words`` varied words, then ``pads`` one-token pad words. The first round moves
    ``words`` by the measured error (coarse, words are not all one token); later rounds move
    only ``pads``, so the search cannot jump over a target. Returns the fillers, the placed
    spans and the prompt length; ``reserve`` output tokens must still fit in the context.
    """
    budget = spec.max_num_batched_tokens
    fillers = [(budget * (spec.first_multiple if i == 0 else 1) // 2, 0) for i in range(n_images)]
    boundaries = [(spec.first_multiple + i) * budget for i in range(n_images)]
    for round_ in range(spec.max_iterations):
        result = tokenizer(render(fillers))
        spans = image_spans(result.tokens, image_token)
        if len(spans) != n_images:
            raise CalibrationError(f"expected {n_images} image spans, /tokenize shows {len(spans)}")
        targets = [target_offset(b, s.length, p)
                   for b, s, p in zip(boundaries, spans, placements, strict=True)]
        _check_room(targets, spans)
        deltas = [t - s.offset for t, s in zip(targets, spans, strict=True)]
        if not any(deltas):
            if len(result.tokens) + reserve > result.max_model_len:
                raise CalibrationError(
                    f"prompt of {len(result.tokens)} tokens + {reserve} output tokens exceeds "
                    f"max_model_len {result.max_model_len}; use fewer images or a smaller budget")
            placed = [Span(s.offset, s.length, b, p)
                      for s, b, p in zip(spans, boundaries, placements, strict=True)]
            return fillers, placed, len(result.tokens)
        changes = [d - (deltas[i - 1] if i else 0) for i, d in enumerate(deltas)]
        fillers = [_adjust(f, c, coarse=round_ == 0) for f, c in zip(fillers, changes, strict=True)]
    raise CalibrationError(f"spans not placed after {spec.max_iterations} /tokenize rounds")


def _adjust(filler: tuple[int, int], change: int, *, coarse: bool) -> tuple[int, int]:
    words, pads = filler
    if coarse:
        return max(0, words + change), pads
    pads += change
    if pads < 0:
        words, pads = max(0, words + pads), 0
    return words, pads


def _check_room(targets: list[int], spans: list[Span]) -> None:
    if targets[0] < 0:
        raise CalibrationError("the first target lies before the prompt's start")
    for i in range(1, len(targets)):
        if targets[i] <= targets[i - 1] + spans[i - 1].length:
            raise CalibrationError(
                "max_num_batched_tokens is too small for these images: spans would touch")
