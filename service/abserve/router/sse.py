"""Reading an arm's answer: what each chunk adds to the arm's record.

The stream is split into ``data:`` payloads by ``abserve.base.event_stream.SSEParser`` (the one
SSE splitter, shared with the load generator). ``Transcript`` accumulates one arm's output
from parsed OpenAI/vLLM chunks (or a whole non-streamed body): text, token ids, per-position
top-k logprobs (chat and completions layouts), finish reason, usage and the vLLM request id,
plus the arrival time of every token. The logprobs are kept as parallel lists (chosen tokens
and logprobs, top-k counts, candidates' tokens and logprobs) as they arrive, and stay lists
in the record (``record``: ``abserve.model.token_lists.PositionLists``, the form the store packs):
no per-position model is built on the router's path; ``fill`` builds them for a caller that
wants the models. A chunk whose fields have types vLLM never sends (text that is not a
string, token ids that are not integers, logprobs of another layout) raises ``BadChunk``
before anything of it is kept.

``Transcript.add_event`` is the fast path for what vLLM streams: one msgspec decode of the
event into typed structs (types checked in C) instead of ``orjson.loads`` and the checks
in Python, ~2x less CPU per chunk. It takes an event only when the typed shape is one the
checked path accepts with the same result (a chat chunk without an ``error``, logprobs in
the chat layout or none, exact integer token ids...) and returns False for anything else,
which the caller then reads the checked way (``add``): odd answers are judged exactly as
before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from abserve.model.records import ArmOutcome
from abserve.model.token_lists import PositionLists

DONE = b"[DONE]"
NEG_INF = float("-inf")  # the logprob of vLLM's null (a token of probability 0)


class _Top(msgspec.Struct):
    token: str
    logprob: float | None


class _Position(msgspec.Struct):
    token: str
    logprob: float | None
    top_logprobs: list[_Top] | None = None


class _ChatLogprobs(msgspec.Struct):
    content: list[_Position]


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    message: _Delta | None = None
    text: str | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    logprobs: _ChatLogprobs | None = None


class _Event(msgspec.Struct):
    id: str | None = None
    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


_EVENT = msgspec.json.Decoder(_Event)


class BadChunk(ValueError):
    """A chunk or body whose fields are not of the types vLLM sends."""


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise BadChunk("token_ids")
    return value


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _top(entries: Any) -> list[tuple[str, Any]]:
    """Chat layout top-k: a list of ``{"token": str, "logprob": number}``."""
    top = []
    for c in entries or ():
        if not isinstance(c, dict) or not isinstance(c.get("token"), str) or not _number(
                c.get("logprob")):
            raise BadChunk("top_logprobs")
        top.append((c["token"], c["logprob"]))
    return top


@dataclass
class Transcript:
    """One arm's output as it arrives (choice index 0)."""

    vllm_request_id: str | None = None
    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    # the logprob positions as parallel lists (PositionLists' layout; None: vLLM's null)
    lp_tokens: list[str] = field(default_factory=list)
    lp_values: list[float | None] = field(default_factory=list)
    lp_counts: list[int] = field(default_factory=list)
    top_tokens: list[str] = field(default_factory=list)
    top_values: list[float | None] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    t_first_token: float | None = None

    def add(self, response: dict[str, Any], t: float, streamed: bool = True) -> None:
        """Fold one chunk (or a whole body) arriving at time ``t`` into the transcript."""
        if self.vllm_request_id is None and isinstance(response.get("id"), str):
            self.vllm_request_id = response["id"]
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = {k: v for k, v in usage.items() if isinstance(v, int)}
        for choice in response.get("choices") or ():
            if choice.get("index", 0) == 0:
                self._add_choice(choice, t, streamed)

    def add_event(self, payload: bytes, t: float) -> bool:
        """Fold one streamed event the fast way; False (nothing kept) when the event is not
        of the common shape and must go through ``add`` (see the module docstring)."""
        try:
            event = _EVENT.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        if event.error is not None:
            return False
        choices = event.choices or ()
        if any(c.delta is not None and c.message is not None for c in choices):
            return False  # the checked path picks between them by truthiness
        if self.vllm_request_id is None and event.id is not None:
            self.vllm_request_id = event.id
        if event.usage is not None:
            self.usage = {k: v for k, v in event.usage.items() if isinstance(v, int)}
        for choice in choices:
            if choice.index == 0:
                self._add_typed(choice, t)
        return True

    def _add_typed(self, choice: _Choice, t: float) -> None:
        delta = choice.delta or choice.message
        piece = delta.content if delta is not None else None
        if piece is None:
            piece = choice.text
        ids = choice.token_ids or []
        if piece:
            self.text.append(piece)
        self.token_ids.extend(ids)
        if choice.logprobs is not None:
            self._add_typed_positions(choice.logprobs.content)
        count = len(ids) or (1 if piece else 0)
        if count:
            if self.t_first_token is None:
                self.t_first_token = t
            self.token_times.extend([t] * count)
        if choice.finish_reason is not None:
            self.finish_reason = choice.finish_reason

    def _add_typed_positions(self, content: list[_Position]) -> None:
        tokens, values, counts = self.lp_tokens, self.lp_values, self.lp_counts
        top_tokens, top_values = self.top_tokens, self.top_values
        for p in content:
            tokens.append(p.token)
            values.append(p.logprob)
            top = p.top_logprobs or ()
            counts.append(len(top))
            for c in top:
                top_tokens.append(c.token)
                top_values.append(c.logprob)

    def _add_positions(self, positions: list[tuple[str, Any, list[tuple[str, Any]]]]) -> None:
        """Positions read (and checked) the checked way: numbers as floats, as the typed
        path reads them."""
        for tok, val, top in positions:
            self.lp_tokens.append(tok)
            self.lp_values.append(None if val is None else float(val))
            self.lp_counts.append(len(top))
            self.top_tokens += [t for t, _ in top]
            self.top_values += [None if v is None else float(v) for _, v in top]

    def _add_choice(self, choice: dict[str, Any], t: float, streamed: bool) -> None:
        delta = choice.get("delta") or choice.get("message") or {}
        piece = delta.get("content") if isinstance(delta, dict) else None
        if piece is None:
            piece = choice.get("text")
        finish = choice.get("finish_reason")
        if not isinstance(piece, str | None) or not isinstance(finish, str | None):
            raise BadChunk("content")
        ids = _ints(choice.get("token_ids") or [])
        positions = self._logprobs(choice.get("logprobs"))
        if piece:
            self.text.append(piece)
        self.token_ids.extend(ids)
        self._add_positions(positions)
        count = len(ids) or (1 if piece else 0)
        if count and streamed:
            if self.t_first_token is None:
                self.t_first_token = t
            self.token_times.extend([t] * count)
        if finish is not None:
            self.finish_reason = finish

    @staticmethod
    def _logprobs(lp: Any) -> list[tuple[str, Any, list[tuple[str, Any]]]]:
        """The positions of a choice's logprobs (chat or completions layout)."""
        if not isinstance(lp, dict):
            return []
        out: list[tuple[str, Any, list[tuple[str, Any]]]] = []
        if isinstance(lp.get("content"), list):  # chat layout
            for pos in lp["content"]:
                if not isinstance(pos, dict) or not isinstance(pos.get("token"), str) or not (
                        _number(pos.get("logprob"))):
                    raise BadChunk("logprobs")
                out.append((pos["token"], pos["logprob"], _top(pos.get("top_logprobs"))))
        elif isinstance(lp.get("tokens"), list):  # completions layout
            tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
            for tok, val, top in zip(lp["tokens"], lp.get("token_logprobs") or (), tops,
                                     strict=False):
                if not isinstance(tok, str) or not _number(val) or not isinstance(
                        top, dict | None):
                    raise BadChunk("logprobs")
                top = list((top or {}).items())
                if not all(isinstance(k, str) and _number(v) for k, v in top):
                    raise BadChunk("logprobs")
                out.append((tok, val, top))
        return out

    def record(self, outcome: ArmOutcome) -> PositionLists:
        """Write the transcript into ``outcome``, all but its output logprobs, which are
        returned as lists (``outcome.logprobs`` stays as it was: empty)."""
        outcome.vllm_request_id = self.vllm_request_id
        outcome.text = "".join(self.text)
        outcome.token_ids = self.token_ids
        outcome.token_times = self.token_times
        outcome.t_first_token = self.t_first_token
        outcome.finish_reason = self.finish_reason
        outcome.usage = self.usage
        ids = self.token_ids if len(self.token_ids) == len(self.lp_tokens) else None
        return PositionLists(tokens=self.lp_tokens, logprobs=_floats(self.lp_values),
                             token_ids=ids or None, counts=self.lp_counts,
                             top_tokens=self.top_tokens, top_logprobs=_floats(self.top_values))

    def fill(self, outcome: ArmOutcome) -> None:
        """Write the whole transcript into ``outcome``, the logprobs as models."""
        outcome.logprobs = self.record(outcome).models()


def _floats(values: list[float | None]) -> list[float]:
    """``values`` with vLLM's ``null`` logprob as ``-inf``."""
    if None not in values:
        return values  # type: ignore[return-value]  # no None: a list[float]
    return [NEG_INF if v is None else v for v in values]
