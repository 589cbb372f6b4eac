"""Output equality of saved runs: requests matched across sides by what was asked, not position.

A tool that saved the prompt gives each request a ``prompt_key`` (sha256 of the prompt text and
image hashes, ``abserve.saved.model``). The baseline side's first output per key is kept as a
digest (blake2b) and, while the outputs kept stay under ``KEEP_BYTES``, as content too (token
ids as packed int32 when saved, else the text); each candidate request with a key is compared
to it as it streams: ``identical``, or ``divergent`` at the first differing token (or
character, when only text was saved; a strict prefix diverges where the shorter ends). Past the
budget a mismatch is still counted (by digest), its position is counted as not kept. Nothing
is dropped silently: requests without a key, without an output, failed ones, candidate keys
the baseline never asked and baseline keys no candidate asked are all counted.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import TypeAlias

from abserve.saved.model import SavedRequest

MAX_EXAMPLES = 20
KEEP_BYTES = 256 << 20  # baseline outputs kept whole for divergence positions (digests beyond)
NOT_KEPT = "divergence position not kept (memory budget)"

Output: TypeAlias = "str | array[int]"  # quoted: array is not subscriptable at run time on 3.11
Kept: TypeAlias = "tuple[bytes, bool, Output | None, str]"


@dataclass(frozen=True)
class Divergence:
    """One matched request whose outputs differ."""

    prompt_key: str
    position: int  # first differing token (or character) position, 0-based
    unit: str  # "token" or "character"
    baseline: str  # the baseline's token/character there ("" past its end)
    candidate: str
    baseline_source: str
    candidate_source: str


def digest(output: Output) -> bytes:
    """A 16-byte digest of an output (token ids and text digest apart)."""
    data = output.tobytes() if isinstance(output, array) else b"t" + output.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


def _size(output: Output) -> int:
    return len(output) * (output.itemsize if isinstance(output, array) else 1)


def first_difference(a: Output, b: Output) -> int | None:
    """The first position where two sequences differ (the shorter one's end for a strict
    prefix); None when equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _at(seq: Output, i: int) -> str:
    return str(seq[i]) if i < len(seq) else ""


@dataclass
class OutputMatcher:
    """Keeps the baseline's outputs by prompt key; compares candidates to them as they stream."""

    # prompt key -> (digest, token ids or text, whole output while within the budget, source)
    kept: dict[str, Kept] = field(default_factory=dict)
    keep_bytes: int = KEEP_BYTES
    matched_keys: set[str] = field(default_factory=set)
    problems: dict[str, Counter[str]] = field(
        default_factory=lambda: {"baseline": Counter(), "candidate": Counter()})
    outputs_seen: Counter[str] = field(default_factory=Counter)  # side -> requests with an output
    counts: Counter[str] = field(default_factory=Counter)  # identical / divergent
    by_position: Counter[int] = field(default_factory=Counter)
    examples: list[Divergence] = field(default_factory=list)
    units: set[str] = field(default_factory=set)

    @staticmethod
    def _output(r: SavedRequest) -> Output | None:
        if r.output_token_ids is not None:
            return array("i", r.output_token_ids)
        return r.output_text

    def see(self, side: str, r: SavedRequest, source: str) -> None:
        """Fold one request of ``side`` (all baseline runs must come before any candidate)."""
        problems = self.problems[side]
        if not r.ok:
            problems["failed"] += 1
            return
        output = self._output(r)
        if output is None:
            problems["no output saved"] += 1
            return
        self.outputs_seen[side] += 1
        if r.prompt_key is None:
            problems["no prompt saved"] += 1
            return
        if side == "baseline":
            if r.prompt_key not in self.kept:
                whole = output if _size(output) <= self.keep_bytes else None
                self.keep_bytes -= _size(output) if whole is not None else 0
                self.kept[r.prompt_key] = (digest(output), isinstance(output, array), whole, source)
            return
        base = self.kept.get(r.prompt_key)
        if base is None:
            problems["prompt not in the baseline"] += 1
            return
        self.matched_keys.add(r.prompt_key)
        self._compare(r.prompt_key, base, output, source)

    def _compare(self, key: str, base: Kept, output: Output, source: str) -> None:
        base_digest, ids, kept, base_source = base
        if ids != isinstance(output, array):  # token ids on one side, text on the other
            self.problems["candidate"]["token ids on one side only"] += 1
            return
        unit = "token" if ids else "character"
        self.units.add(unit)
        if base_digest == digest(output):
            self.counts["identical"] += 1
            return
        self.counts["divergent"] += 1
        if kept is None:
            self.problems["candidate"][NOT_KEPT] += 1
            return
        pos = first_difference(kept, output)
        assert pos is not None  # the digests differ
        self.by_position[pos] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(Divergence(key, pos, unit, _at(kept, pos), _at(output, pos),
                                            base_source, source))

    @property
    def comparable(self) -> int:
        return self.counts["identical"] + self.counts["divergent"]

    def unasked(self) -> int:
        """Baseline prompts that no candidate request asked."""
        return len(self.kept) - len(self.matched_keys)

    def not_measured(self) -> str | None:
        """Why equality could not be measured (None when it was)."""
        if self.comparable:
            return None
        if not self.outputs_seen["baseline"] and not self.outputs_seen["candidate"]:
            return "no side saved its outputs"
        if not self.outputs_seen["baseline"] or not self.outputs_seen["candidate"]:
            side = "baseline" if not self.outputs_seen["baseline"] else "candidate"
            return f"the {side} side saved no outputs"
        if self.problems["baseline"]["no prompt saved"] or self.problems["candidate"]["no prompt saved"]:
            return "outputs were saved, but not the prompts, so no request can be matched across sides"
        return "no candidate request asked a prompt the baseline asked"
