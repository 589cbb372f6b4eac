"""Equality you can inspect: each mismatching request's two outputs side by side.

For every example the judgment kept (``EqualityLine.examples``, the first mismatches), the
stored exchange gives both arms' output tokens; the first divergence (or, for a ``drift``, the
first position whose logprobs moved beyond the tolerance) is highlighted, with a few tokens of
context, the top-k at that position on each side, and the logprob drift per position where both
chose the same token.

Images: the store keeps no image bytes, sizes or prompt positions (the router hashes each image
URL and keeps only the hashes, in prompt order), so a request's images are shown as their count,
their order and the start of their hash; for the first ``MAX_REBUILT`` mismatches a request that
abserve's load generator sent is rebuilt from its corpus tags, and its images are shown as
thumbnails with their positions in the prompt when they hash to the recorded ones
(``abserve.report.thumbnails``).

Pure: built from the ``Judgment`` and the exchanges the report command read from the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from abserve.compare.equality import PairResult
from abserve.compare.model import Judgment
from abserve.model.provenance import RunProvenance
from abserve.model.records import ArmOutcome, Exchange
from abserve.report.thumbnails import Rebuilt, rebuild

MAX_REBUILT = 5  # mismatches whose images are rebuilt as thumbnails (a many-image request takes ~1 s)
CONTEXT = 12  # tokens shown before the divergence
AFTER = 12  # and after it
IMAGE_NOTE = ("The store keeps no image bytes, sizes or prompt positions: the router records only "
              "a hash of each image, in prompt order (image 1 comes first in the prompt). A request "
              "that abserve's load generator sent is rebuilt from its corpus tags, and its images are "
              "shown with their prompt positions only when they hash to the recorded ones.")
# shown with a mismatch: what rebuilds a generated request, and the line of an imported one
REBUILD_TAGS = ("profile", "corpus-index", "seed", "items", "token-estimate", "source-line")


@dataclass(frozen=True)
class Token:
    text: str
    state: str  # "same" | "diverge" | "after"
    position: int


@dataclass(frozen=True)
class DriftRow:
    position: int
    token: str
    left: float
    right: float

    @property
    def delta(self) -> float:
        return self.right - self.left


@dataclass(frozen=True)
class Mismatch:
    """One mismatching request, ready to show."""

    result: PairResult
    at: int | None  # the highlighted position
    left: list[Token]
    right: list[Token]
    skipped: int  # tokens before the shown window
    left_len: int
    right_len: int
    drift: list[DriftRow] = field(default_factory=list)  # largest |Δlogprob| first
    images: list[str] = field(default_factory=list)  # hash prefixes, prompt order
    rebuild: dict[str, str] = field(default_factory=dict)  # corpus tags
    rebuilt: Rebuilt | None = None  # thumbnails and prompt positions, or why there are none


def short_hash(h: str) -> str:
    """``blake3:1f2e3d4c5b6a`` of ``blake3:<64 hex>`` (the scheme kept), or the first 12 characters."""
    scheme, sep, digest = h.partition(":")
    return f"{scheme}:{digest[:12]}" if sep else h[:12]


def _tokens(out: ArmOutcome) -> list[str]:
    if out.logprobs:
        return [p.token for p in out.logprobs]
    return [str(t) for t in out.token_ids]


def _window(tokens: list[str], at: int | None, lo: int) -> list[Token]:
    hi = len(tokens) if at is None else min(len(tokens), at + AFTER + 1)
    out = []
    for i in range(lo, hi):
        state = "same" if at is None or i < at else "diverge" if i == at else "after"
        out.append(Token(tokens[i], state, i))
    return out


def drift_rows(left: ArmOutcome, right: ArmOutcome, limit: int = 5) -> list[DriftRow]:
    """Positions where both arms chose the same token, by largest logprob difference."""
    rows = [DriftRow(i, a.token, a.logprob, b.logprob)
            for i, (a, b) in enumerate(zip(left.logprobs, right.logprobs, strict=False))
            if (a.token_id, a.token) == (b.token_id, b.token) and a.logprob != b.logprob]
    return sorted(rows, key=lambda r: -abs(r.delta))[:limit]


def mismatch(result: PairResult, ex: Exchange,
             provenance: RunProvenance | None = None) -> Mismatch | None:
    """One mismatch's view; ``provenance`` (the run's) asks for its images rebuilt."""
    left, right = ex.arms.get(result.left), ex.arms.get(result.right)
    if left is None or right is None:
        return None
    at = result.position if result.position is not None else result.drift_position
    lt, rt = _tokens(left), _tokens(right)
    lo = 0 if at is None else max(0, at - CONTEXT)
    return Mismatch(
        result=result, at=at, left=_window(lt, at, lo), right=_window(rt, at, lo), skipped=lo,
        left_len=len(lt), right_len=len(rt), drift=drift_rows(left, right),
        images=[short_hash(h) for h in ex.image_hashes],
        rebuild={k: v for k, v in ex.tags.items() if k in REBUILD_TAGS},
        rebuilt=None if provenance is None else rebuild(ex, provenance),
    )


def mismatches(j: Judgment, exchanges: Mapping[str, Exchange] | None) -> list[Mismatch]:
    """The main pair's examples with their outputs (empty without the exchanges)."""
    if not exchanges or not j.equality:
        return []
    out: list[Mismatch] = []
    for result in j.equality[0].examples:
        ex = exchanges.get(result.request_id)
        prov = j.provenance if len(out) < MAX_REBUILT else None
        view = mismatch(result, ex, prov) if ex is not None else None
        if view is not None:
            out.append(view)
    return out


def wanted(j: Judgment) -> set[str]:
    """Request ids whose exchanges the report needs (every pair's examples)."""
    return {x.request_id for line in j.equality for x in line.examples}
