"""Reading an arm's answer: what each chunk adds to the arm's record.

The stream is split into ``data:`` payloads by ``abserve.event_stream.SSEParser`` (the one SSE
splitter, shared with the load generator). ``Transcript`` accumulates one arm's output from
parsed OpenAI/vLLM chunks (or a whole non-streamed body): text, token ids, per-position
top-k logprobs (chat and completions layouts), finish reason, usage and the vLLM request
id, plus the arrival time of every token. It keeps raw dicts while the stream runs and
builds the record models once, at the end (``fill``), to keep the hot path short. A chunk
whose fields have types vLLM never sends (text that is not a string, token ids that are not
integers, logprobs of another layout) raises ``BadChunk`` before anything of it is kept.

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
from pydantic import TypeAdapter

from abserve.records import ArmOutcome, PositionLogprobs

DONE = b"[DONE]"
_POSITIONS = TypeAdapter(list[PositionLogprobs])


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
    logprobs: list[tuple[str, float | None, Any]] = field(default_factory=list)
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
            self.logprobs.extend((p.token, p.logprob, [(c.token, c.logprob)
                                                         for c in p.top_logprobs or ()])
                                 for p in choice.logprobs.content)
        count = len(ids) or (1 if piece else 0)
        if count:
            if self.t_first_token is None:
                self.t_first_token = t
            self.token_times.extend([t] * count)
        if choice.finish_reason is not None:
            self.finish_reason = choice.finish_reason

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
        self.logprobs.extend(positions)
        count = len(ids) or (1 if piece else 0)
        if count and streamed:
            if self.t_first_token is None:
                self.t_first_token = t
            self.token_times.extend([t] * count)
        if finish is not None:
            self.finish_reason = finish

    @staticmethod
    def _logprobs(lp: Any) -> list[tuple[str, Any, Any]]:
        """The positions of a choice's logprobs (chat or completions layout)."""
        if not isinstance(lp, dict):
            return []
        out: list[tuple[str, Any, Any]] = []
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

    def fill(self, outcome: ArmOutcome) -> None:
        """Write the transcript into ``outcome`` (building the record models once)."""
        outcome.vllm_request_id = self.vllm_request_id
        outcome.text = "".join(self.text)
        outcome.token_ids = self.token_ids
        outcome.token_times = self.token_times
        outcome.t_first_token = self.t_first_token
        outcome.finish_reason = self.finish_reason
        outcome.usage = self.usage
        ids = self.token_ids if len(self.token_ids) == len(self.logprobs) else None
        outcome.logprobs = _POSITIONS.validate_python([  # one validator call: ~2x faster
            {"token": tok, "logprob": _num(val), "token_id": ids[i] if ids else None,
             "top": [{"token": t, "logprob": _num(v)} for t, v in top]}
            for i, (tok, val, top) in enumerate(self.logprobs)
        ])


def _num(value: Any) -> float:
    return float(value) if value is not None else float("-inf")
