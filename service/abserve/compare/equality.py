"""Graded output equality of one exchange between two arms.

Classes, from best to worst:

- ``identical``: same token ids, and every chosen logprob and top-k set within ``drift_tolerance``
  (0.0 = bitwise, which is what two servers running the same numerics produce);
- ``drift``: same token ids but some logprob differs beyond the tolerance, in the output or,
  on the exchanges the router sampled for it, in the prompt logprobs: a change that flipped
  no token (issue 9: a fault in one image's embedding can show only here);
- ``close``: tokens differ, and at the first difference each side's token is in the other side's
  top-k logprobs (vLLM's ``check_logprobs_close``): a near-tie resolved differently;
- ``divergent``: tokens differ otherwise (or one output is a strict prefix of the other);
- ``incomparable``: either side failed, was truncated, or returned no tokens.

Status, finish reason and usage mismatches are flagged on the side, whatever the class.
Pure functions: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from abserve.model.records import ArmOutcome, PositionLogprobs, SlimOutcome, TopLogprob

EqualityClass = Literal["identical", "drift", "close", "divergent", "incomparable"]
CLASSES: tuple[EqualityClass, ...] = ("identical", "drift", "close", "divergent", "incomparable")


class Candidate(BaseModel):
    """One top-k candidate as shown in a report."""

    token: str
    token_id: int | None = None
    logprob: float


class SideAtDivergence(BaseModel):
    """One arm's view of the first differing position."""

    token: str | None = None  # None: this side's output ended before the position
    token_id: int | None = None
    logprob: float | None = None
    top: list[Candidate] = Field(default_factory=list)
    margin: float | None = None  # logprob of the best candidate minus the second best
    other_in_top: bool | None = None  # is the other side's token in this side's top-k?


class PairResult(BaseModel):
    """How one exchange compares between a ``left`` (reference) and a ``right`` arm."""

    request_id: str
    left: str
    right: str
    cls: EqualityClass
    position: int | None = None  # first differing output position (0-based)
    left_side: SideAtDivergence | None = None
    right_side: SideAtDivergence | None = None
    max_logprob_delta: float = 0.0  # over positions where both chose the same token
    drift_position: int | None = None  # first position whose logprobs differ beyond tolerance
    prompt_positions: int | None = None  # prompt positions compared; None = not sampled on both
    prompt_logprob_delta: float | None = None  # largest prompt-logprob gap
    prompt_drift_position: int | None = None  # first prompt position beyond tolerance
    status_mismatch: bool = False
    finish_mismatch: bool = False
    usage_mismatch: bool = False
    left_problem: str | None = None  # error class, "truncated" or "empty"
    right_problem: str | None = None
    profile: str | None = None
    items: int | None = None


@dataclass(slots=True)
class PairDigest:
    """The scalars of a ``PairResult`` that the equality roll-up counts (no sides, no top-k):
    what the streaming judgment keeps of every exchange's pair (``abserve.compare.digest``)."""

    request_id: str
    cls: EqualityClass
    position: int | None
    max_logprob_delta: float
    drift_position: int | None
    prompt_positions: int | None
    prompt_logprob_delta: float | None
    prompt_drift_position: int | None
    status_mismatch: bool
    finish_mismatch: bool
    usage_mismatch: bool
    left_problem: str | None
    right_problem: str | None
    profile: str | None
    items: int | None

    @classmethod
    def of(cls, r: PairResult) -> PairDigest:
        return cls(r.request_id, r.cls, r.position, r.max_logprob_delta, r.drift_position,
                   r.prompt_positions, r.prompt_logprob_delta, r.prompt_drift_position,
                   r.status_mismatch, r.finish_mismatch, r.usage_mismatch, r.left_problem,
                   r.right_problem, r.profile, r.items)


def problem_of(outcome: ArmOutcome | SlimOutcome | None) -> str | None:
    """Why an arm's output cannot be compared, or None when it can."""
    if outcome is None:
        return "missing"
    if outcome.error_class is not None:
        return outcome.error_class
    if not outcome.ok:
        return f"status_{outcome.status}"
    if outcome.truncated:
        return "truncated"
    if not (outcome.has_tokens if isinstance(outcome, SlimOutcome) else token_sequence(outcome)):
        return "empty"
    return None


def token_sequence(outcome: ArmOutcome) -> list[int] | list[str]:
    """The token ids, or the chosen tokens' strings when the arm returned no ids."""
    if outcome.token_ids:
        return list(outcome.token_ids)
    return [p.token for p in outcome.logprobs]


def _key(item: PositionLogprobs | TopLogprob, by_id: bool) -> int | str | None:
    return item.token_id if by_id else item.token


def _sorted_top(pos: PositionLogprobs) -> list[TopLogprob]:
    return sorted(pos.top, key=lambda t: t.logprob, reverse=True)


def margin_of(pos: PositionLogprobs) -> float | None:
    """Logprob gap between the two best candidates at a position (None without two)."""
    top = _sorted_top(pos)
    return top[0].logprob - top[1].logprob if len(top) >= 2 else None


def _side(outcome: ArmOutcome, index: int, other_token: int | str | None, by_id: bool) -> SideAtDivergence:
    seq = token_sequence(outcome)
    token_key = seq[index] if index < len(seq) else None
    pos = outcome.logprobs[index] if index < len(outcome.logprobs) else None
    if pos is None:
        return SideAtDivergence(
            token=None if token_key is None else str(token_key),
            token_id=token_key if isinstance(token_key, int) else None,
        )
    keys = {_key(t, by_id) for t in pos.top}
    return SideAtDivergence(
        token=pos.token if token_key is not None else None,
        token_id=pos.token_id if token_key is not None else None,
        logprob=pos.logprob if token_key is not None else None,
        top=[Candidate(token=t.token, token_id=t.token_id, logprob=t.logprob) for t in _sorted_top(pos)],
        margin=margin_of(pos),
        other_in_top=None if other_token is None else other_token in keys,
    )


def _drift(
    left: list[PositionLogprobs], right: list[PositionLogprobs], length: int, by_id: bool,
    tolerance: float
) -> tuple[float, int | None]:
    """Largest chosen-logprob gap over the common prefix, and the first position beyond tolerance.

    A position also drifts when its top-k candidate sets differ or a candidate's logprob moved
    beyond the tolerance.
    """
    # the hot loop of every equality check (a pair a digested exchange): the maxima are taken
    # as ``max`` takes them (a later value replaces the kept one only when greater), inline
    worst, first = 0.0, None
    for i in range(min(length, len(left), len(right))):
        lp, rp = left[i], right[i]
        delta = abs(lp.logprob - rp.logprob)
        ltop: dict[int | str | None, float]
        rtop: dict[int | str | None, float]
        if by_id:
            ltop = {t.token_id: t.logprob for t in lp.top}
            rtop = {t.token_id: t.logprob for t in rp.top}
        else:
            ltop = {t.token: t.logprob for t in lp.top}
            rtop = {t.token: t.logprob for t in rp.top}
        same_set = ltop.keys() == rtop.keys()
        if same_set:
            for k, logprob in ltop.items():
                gap = abs(logprob - rtop[k])
                if gap > delta:
                    delta = gap
        if delta > worst:
            worst = delta
        if first is None and (delta > tolerance or not same_set):
            first = i
    return worst, first


def _compare_prompts(
    result: PairResult, left: ArmOutcome, right: ArmOutcome, tolerance: float
) -> None:
    """Prompt logprobs, where both arms were asked for them: largest gap, first drift.

    A prompt of another length (or another token at a position) drifts where it differs.
    """
    lp, rp = left.prompt_logprobs, right.prompt_logprobs
    if lp is None or rp is None:
        return
    common = min(len(lp), len(rp))
    worst, first = _drift(lp, rp, common, True, tolerance)
    moved = next((i for i in range(common) if lp[i].token_id != rp[i].token_id), None)
    if moved is None and len(lp) != len(rp):
        moved = common
    if moved is not None and (first is None or moved < first):
        first = moved
    result.prompt_positions = max(len(lp), len(rp))
    result.prompt_logprob_delta, result.prompt_drift_position = worst, first


def _usage_differs(left: ArmOutcome, right: ArmOutcome) -> bool:
    if left.usage is None or right.usage is None:
        return (left.usage is None) != (right.usage is None)
    keys = ("prompt_tokens", "completion_tokens")
    return any(left.usage.get(k) != right.usage.get(k) for k in keys)


def compare_pair(
    request_id: str,
    left_name: str,
    right_name: str,
    left: ArmOutcome | None,
    right: ArmOutcome | None,
    *,
    drift_tolerance: float = 0.0,
) -> PairResult:
    """Compare one exchange's outputs of two arms; ``left`` is the reference."""
    base = PairResult(request_id=request_id, left=left_name, right=right_name, cls="incomparable")
    base.left_problem, base.right_problem = problem_of(left), problem_of(right)
    if left is not None and right is not None:
        base.status_mismatch = left.status != right.status
        base.finish_mismatch = left.finish_reason != right.finish_reason
        base.usage_mismatch = _usage_differs(left, right)
    if base.left_problem or base.right_problem or left is None or right is None:
        return base
    by_id = bool(left.token_ids) and bool(right.token_ids)
    lseq = token_sequence(left) if by_id else [p.token for p in left.logprobs]
    rseq = token_sequence(right) if by_id else [p.token for p in right.logprobs]
    common = min(len(lseq), len(rseq))
    index = next((i for i in range(common) if lseq[i] != rseq[i]), None)
    if index is None and len(lseq) != len(rseq):
        index = common
    base.max_logprob_delta, base.drift_position = _drift(
        left.logprobs, right.logprobs, common if index is None else index, by_id, drift_tolerance
    )
    _compare_prompts(base, left, right, drift_tolerance)
    if index is None:
        same = base.drift_position is None and base.prompt_drift_position is None
        base.cls = "identical" if same else "drift"
        return base
    lt = lseq[index] if index < len(lseq) else None
    rt = rseq[index] if index < len(rseq) else None
    base.position = index
    base.left_side = _side(left, index, rt, by_id)
    base.right_side = _side(right, index, lt, by_id)
    near_tie = bool(base.left_side.other_in_top) and bool(base.right_side.other_in_top)
    base.cls = "close" if near_tie else "divergent"
    return base
