"""N arms: every candidate judged against the one baseline, with Holm's correction across them.

An experiment may run one baseline, any number of candidates and noise floors, all fed the
same requests at the same instant. Each candidate is judged exactly as a two-arm run would be
(``abserve.compare.judge`` with the roles baseline / that candidate / the first floor), so with
one candidate nothing changes. With m candidates the family-wise error rate over the m
decisions is held at ``1 - policy.confidence`` by Holm's step-down procedure, applied to each
candidate's decision (pass or fail: each rejects one of its two hypotheses):

1. judge every candidate at level alpha / m (confidence ``1 - alpha / m``);
2. the candidates decided there are settled; with k settled so far, judge the others again at
   alpha / (m - k); repeat until a step settles no new candidate.

Each candidate keeps the judgment of the last level it was judged at, and the level is stated
in its line and in ``correction``. Latency and equality intervals here are anytime-valid
confidence sequences, so a decision at a stricter level stays valid at every look. The family
verdict is the worst candidate's (invalid, fail, inconclusive/unstable, marginal, pass).

``best_by_items`` answers "which arm is best at which images per request": per items bucket of
the breakdowns, each candidate's shift against the baseline (the baseline's is 0) and the arm
with the lowest latency; "clear" when the best candidate's interval lies wholly below 0 (for
the baseline: when every candidate's interval lies wholly above 0). These per-bucket intervals
are the breakdowns' fixed-sample ones, descriptive, not gates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

from abserve.compare.judge import judge
from abserve.compare.model import EXIT_CODES, Judgment, Outcome
from abserve.compare.policy import ArmRoles, Policy
from abserve.model.records import Exchange, RunInfo

SEVERITY: tuple[Outcome, ...] = ("invalid", "fail", "inconclusive", "unstable", "marginal", "pass")
DECIDED_VERDICTS = ("pass", "fail")

Family = tuple[str, list[str], str | None]  # baseline, candidates, floor (arm names)


class HolmStep(BaseModel):
    """One step of the procedure: the level used, who was judged, who was settled."""

    step: int
    alpha: float
    judged: list[str]
    settled: list[str]


class CandidateLine(BaseModel):
    """One candidate against the baseline, at its Holm level."""

    arm: str
    verdict: Outcome
    exit_code: int
    alpha: float
    confidence: float
    settled_at_step: int | None
    reasons: list[str] = Field(default_factory=list)


class BucketBest(BaseModel):
    """One items-per-request bucket of one metric: each arm's shift and the best arm."""

    metric: str
    bucket: str
    shifts: dict[str, tuple[float, float | None, float | None]]  # arm -> (estimate, low, high) s
    best: str
    clear: bool


class FamilyJudgment(BaseModel):
    """Every candidate judged against the baseline, Holm-corrected."""

    baseline: str
    floor: str | None
    candidates: dict[str, CandidateLine]
    judgments: dict[str, Judgment] = Field(exclude=True)
    steps: list[HolmStep]
    family_alpha: float
    correction: str
    verdict: Outcome
    exit_code: int
    reasons: list[str]
    best_by_items: list[BucketBest] = Field(default_factory=list)


def roles_for(policy: Policy, baseline: str, candidate: str, floor: str | None, alpha: float) -> Policy:
    """The policy with these roles and confidence ``1 - alpha``."""
    return policy.model_copy(update={"arms": ArmRoles(baseline=baseline, candidate=candidate, floor=floor),
                                     "confidence": 1.0 - alpha})


Levels = dict[str, tuple[float, int | None]]


def holm_levels(m: int, alpha: float) -> list[float]:
    """Every level Holm's step-down can judge one of ``m`` candidates at, by how many were
    settled before: alpha / m, alpha / (m - 1), ..., alpha."""
    return [alpha / (m - settled) for settled in range(m)]


def holm(candidates: list[str], alpha: float,
         decide: Callable[[str, float], Outcome]) -> tuple[Levels, list[HolmStep]]:
    """Holm's step-down over ``candidates``: ``decide(candidate, level)`` is the candidate's verdict
    at that level. Returns each candidate's last level and the step that settled it (None:
    never), and the steps."""
    m = len(candidates)
    remaining, settled_total = list(candidates), 0
    levels: dict[str, tuple[float, int | None]] = {}
    steps: list[HolmStep] = []
    while remaining:
        level = holm_levels(m, alpha)[settled_total]
        settled = []
        for name in remaining:
            levels[name] = (level, None)
            if decide(name, level) in DECIDED_VERDICTS:
                settled.append(name)
        steps.append(HolmStep(step=len(steps) + 1, alpha=level, judged=list(remaining), settled=settled))
        for name in settled:
            levels[name] = (level, len(steps))
        if not settled:
            break
        settled_total += len(settled)
        remaining = [n for n in remaining if n not in settled]
    return levels, steps


def judge_family(run: RunInfo, exchanges: Iterable[Exchange], policy: Policy, baseline: str,
                 candidates: list[str], floor: str | None) -> FamilyJudgment:
    """Judge each candidate against ``baseline`` with Holm's correction (see the module doc)."""
    exchanges = list(exchanges)

    def judge_at(name: str, level: float) -> Judgment:
        return judge(run, exchanges, roles_for(policy, baseline, name, floor, level))

    return family_judgment(judge_at, policy, baseline, candidates, floor)


def family_judgment(judge_at: Callable[[str, float], Judgment], policy: Policy, baseline: str,
                    candidates: list[str], floor: str | None) -> FamilyJudgment:
    """``judge_family`` with each candidate's judgment at a level given by ``judge_at(candidate,
    level)`` (a sequential run's looks judge digests kept across rounds: ``launch.looks``)."""
    if not candidates:
        raise ValueError("judge_family needs at least one candidate")
    alpha = 1.0 - policy.confidence
    kept: dict[str, Judgment] = {}

    def decide(name: str, level: float) -> Outcome:
        kept[name] = judge_at(name, level)
        return kept[name].verdict

    levels, steps = holm(candidates, alpha, decide)
    lines = {name: CandidateLine(arm=name, verdict=kept[name].verdict, exit_code=kept[name].exit_code,
                                 alpha=levels[name][0], confidence=1.0 - levels[name][0],
                                 settled_at_step=levels[name][1], reasons=kept[name].reasons)
             for name in candidates}
    worst = min((line.verdict for line in lines.values()), key=SEVERITY.index)
    reasons = [f"{name}: {line.verdict} at alpha {line.alpha:.4g}" for name, line in lines.items()
               if line.verdict == worst]
    return FamilyJudgment(
        baseline=baseline, floor=floor, candidates=lines, judgments=kept, steps=steps, family_alpha=alpha,
        correction=correction_text(len(candidates), alpha, steps), verdict=worst,
        exit_code=EXIT_CODES[worst], reasons=reasons, best_by_items=best_by_items(kept, baseline))


def correction_text(m: int, alpha: float, steps: list[HolmStep]) -> str:
    """The multiplicity correction in one sentence, as the report states it."""
    if m == 1:
        return f"one candidate: no multiplicity correction (alpha {alpha:.4g})"
    path = "; ".join(f"step {s.step} at alpha {s.alpha:.4g}: settled {', '.join(s.settled) or 'none'}"
                     for s in steps)
    return (f"Holm step-down over {m} candidates, family-wise error rate {alpha:.4g} "
            f"(each candidate's decision at alpha/{m} first, then alpha/(m - settled)): {path}")


def best_by_items(judgments: dict[str, Judgment], baseline: str) -> list[BucketBest]:
    """Per metric and items bucket: each candidate's shift against the baseline and the best arm."""
    table: dict[tuple[str, str], dict[str, tuple[float, float | None, float | None]]] = {}
    for name, judged in judgments.items():
        for row in judged.breakdowns:
            if row.dimension == "items" and row.estimate is not None:
                table.setdefault((row.metric, row.group), {})[name] = (row.estimate, row.low, row.high)
    out = []
    for (metric, bucket), shifts in table.items():
        best = min(shifts, key=lambda n: shifts[n][0])
        if shifts[best][0] >= 0:
            clear = all(low is not None and low > 0 for _, low, _ in shifts.values())
            best = baseline
        else:
            high = shifts[best][2]
            clear = high is not None and high < 0
        out.append(BucketBest(metric=metric, bucket=bucket, shifts=shifts, best=best, clear=clear))
    return sorted(out, key=lambda b: (b.metric, _bucket_key(b.bucket)))


def _bucket_key(bucket: str) -> int:
    digits = "".join(ch if ch.isdigit() else " " for ch in bucket).split()
    return int(digits[0]) if digits else -1
