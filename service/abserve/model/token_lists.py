"""An arm's token-level data as parallel lists: what the store packs, without models.

A record's logprobs are one ``PositionLogprobs`` model per position with one ``TopLogprob``
per top-k candidate (``abserve.model.records``): ~100 models an arm at 16 tokens x top-5, and
building them was the largest share of the router's CPU a request after the HTTP layers
(``benchmarks/router_overhead.md``). The stored form packs them as columns anyway
(``abserve.model.token_pack``), so the router keeps an arm's logprobs as ``PositionLists`` (the
chosen tokens, their logprobs and ids, the top-k counts and the candidates' tokens,
logprobs and ids, each one flat list) from the upstream's answer to the store row, and
builds the models only where something reads them (``PositionLists.models``,
``RoutedExchange.full``: a test's sink, a log).

``ArmTokens`` is what the packer reads of one arm (its token ids, times, text, output and
prompt positions); ``ArmTokens.of_outcome`` takes it from a validated ``ArmOutcome``, so
records made anywhere pack through the same code. Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from abserve.model.records import ArmOutcome, Exchange, PositionLogprobs

_POSITIONS = TypeAdapter(list[PositionLogprobs])


@dataclass(slots=True)
class PositionLists:
    """Logprob positions as parallel lists. Position ``i`` is ``tokens[i]``, ``logprobs[i]``
    (a float: ``-inf`` for vLLM's ``null``) and ``token_ids[i]``; its top-k candidates are
    the next ``counts[i]`` entries of ``top_tokens``, ``top_logprobs`` and ``top_ids``. An
    id list that is None holds no id (as ``None`` ids everywhere)."""

    tokens: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_ids: Sequence[int | None] | None = None
    counts: list[int] = field(default_factory=list)
    top_tokens: list[str] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)
    top_ids: Sequence[int | None] | None = None

    @classmethod
    def of_models(cls, positions: list[PositionLogprobs]) -> PositionLists:
        tops = [t for p in positions for t in p.top]
        return cls(tokens=[p.token for p in positions], logprobs=[p.logprob for p in positions],
                   token_ids=[p.token_id for p in positions],
                   counts=[len(p.top) for p in positions], top_tokens=[t.token for t in tops],
                   top_logprobs=[t.logprob for t in tops], top_ids=[t.token_id for t in tops])

    def models(self) -> list[PositionLogprobs]:
        """The validated models of these positions (one validator call for all of them)."""
        n, m = len(self.tokens), len(self.top_tokens)
        ids = self.token_ids or [None] * n
        top_ids = self.top_ids or [None] * m
        out, at = [], 0
        for i in range(n):
            end = at + self.counts[i]
            top = [{"token": self.top_tokens[j], "logprob": self.top_logprobs[j],
                    "token_id": top_ids[j]} for j in range(at, end)]
            out.append({"token": self.tokens[i], "logprob": self.logprobs[i],
                        "token_id": ids[i], "top": top})
            at = end
        return _POSITIONS.validate_python(out)


@dataclass(slots=True)
class ArmTokens:
    """What the packer stores of one arm: the outcome's token fields as lists."""

    token_ids: list[int]
    token_times: list[float]
    text: str
    logprobs: PositionLists
    prompt_logprobs: PositionLists | None

    @classmethod
    def of_outcome(cls, outcome: ArmOutcome, logprobs: PositionLists | None = None) -> ArmTokens:
        """``outcome``'s token data; its output positions from ``logprobs`` when given (the
        router's lists: the outcome's own ``logprobs`` are then left empty)."""
        prompts = outcome.prompt_logprobs
        return cls(token_ids=outcome.token_ids, token_times=outcome.token_times, text=outcome.text,
                   logprobs=logprobs if logprobs is not None else PositionLists.of_models(outcome.logprobs),
                   prompt_logprobs=None if prompts is None else PositionLists.of_models(prompts))


@dataclass(frozen=True, slots=True)
class RoutedExchange:
    """An exchange as the router finishes it: ``head``, the record with every arm's output
    ``logprobs`` left empty (scalars, token ids, times, text, prompt logprobs all there), and
    ``logprobs``, each arm's output positions as lists. The store row is packed from these
    (``abserve.store.rows.routed_row``); ``full()`` builds the complete ``Exchange`` with its
    per-position models, for whoever reads those."""

    head: Exchange
    logprobs: dict[str, PositionLists]

    @property
    def run_id(self) -> str:
        return self.head.run_id

    def full(self) -> Exchange:
        """The record with its output logprobs as models (built now, on each call)."""
        return self.head.model_copy(update={"arms": {
            name: self.arm(name) for name in self.head.arms}})

    def arm(self, name: str) -> ArmOutcome:
        """Arm ``name``'s outcome with its output logprobs as models."""
        outcome = self.head.arms[name]
        positions = self.logprobs.get(name)
        if positions is None:
            return outcome
        return outcome.model_copy(update={"logprobs": positions.models()})

    def tokens(self) -> dict[str, ArmTokens]:
        """Each arm's token data, as the packer reads it."""
        return {name: ArmTokens.of_outcome(outcome, self.logprobs.get(name))
                for name, outcome in self.head.arms.items()}
