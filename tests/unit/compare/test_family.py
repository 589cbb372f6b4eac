"""N arms: each candidate judged against the baseline, Holm's step-down across candidates.

One candidate gives exactly the two-arm judgment (same verdict, same model); with three the
levels are alpha/3, alpha/2, alpha in turn, stated in the correction; the step-down settles
exactly the hypotheses classical Holm rejects (property test on p-values)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.records_factory import arm, exchange, provenance, run_info

from abserve.compare import judge
from abserve.compare.family import best_by_items, correction_text, holm, judge_family, roles_for
from abserve.compare.model import Outcome
from abserve.compare.policy import Policy
from abserve.model.records import Exchange

POLICY = Policy(min_samples=20)


def three_candidates(n: int = 64) -> list[Exchange]:
    """Baseline a; b identical to a; c 3 ms per token slower; h faster on many-image requests."""
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        k = (1, 4, 64, 256)[i % 4]
        base_itl = 0.01 + rng.normal(0, 0.0002)
        outs = [arm("a", itl=base_itl, ttft=0.05), arm("b", itl=base_itl + rng.normal(0, 1e-5), ttft=0.05),
                arm("c", itl=base_itl + 0.003, ttft=0.05),
                arm("h", itl=base_itl - (0.002 if k >= 64 else 0.0), ttft=0.05)]
        out.append(exchange(i, outs, items=k))
    return out


def run4() -> object:
    return run_info({name: provenance("linear") for name in ("a", "b", "c", "h")})


def test_one_candidate_is_the_two_arm_judgment_unchanged() -> None:
    exchanges, run = three_candidates(), run4()
    family = judge_family(run, exchanges, POLICY, "a", ["c"], None)  # type: ignore[arg-type]
    alone = judge(run, exchanges, roles_for(POLICY, "a", "c", None, 1 - POLICY.confidence))  # type: ignore[arg-type]
    assert family.judgments["c"].model_dump() == alone.model_dump()
    assert family.verdict == alone.verdict == "fail"
    assert family.exit_code == alone.exit_code
    assert family.candidates["c"].alpha == 1 - POLICY.confidence
    assert family.correction.startswith("one candidate: no multiplicity correction")


def test_three_candidates_are_judged_with_holm_and_the_correction_is_stated() -> None:
    family = judge_family(run4(), three_candidates(), POLICY, "a", ["b", "c", "h"], None)  # type: ignore[arg-type]
    alpha = 1 - POLICY.confidence
    assert family.steps[0].alpha == alpha / 3
    assert family.steps[0].judged == ["b", "c", "h"]
    assert family.candidates["c"].verdict == "fail"
    assert family.candidates["c"].settled_at_step == 1
    assert family.candidates["c"].alpha == alpha / 3
    # every later step's level is alpha / (3 - settled so far)
    settled = 0
    for step in family.steps:
        assert step.alpha == alpha / (3 - settled)
        settled += len(step.settled)
    assert family.correction.startswith(
        f"Holm step-down over 3 candidates, family-wise error rate {alpha:.4g}")
    assert "step 1 at alpha 0.01667: settled" in family.correction
    assert family.verdict == "fail"
    assert family.exit_code == 1
    assert any(r.startswith("c: fail") for r in family.reasons)
    # the judgment of c at its level is the two-arm judgment at that level
    alone = judge(run4(), three_candidates(), roles_for(POLICY, "a", "c", None, alpha / 3))  # type: ignore[arg-type]
    assert family.judgments["c"].verdict == alone.verdict


def test_best_arm_per_images_bucket() -> None:
    family = judge_family(run4(), three_candidates(), POLICY, "a", ["b", "c", "h"], None)  # type: ignore[arg-type]
    tpot = {row.bucket: row for row in family.best_by_items if row.metric == "tpot"}
    assert tpot["64-127"].best == "h"
    assert tpot["64-127"].clear
    assert tpot["256-511"].best == "h"
    assert tpot["1"].best in ("a", "b")  # h and b equal a there, c slower: nobody clearly beats a
    assert best_by_items({}, "a") == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 0.2), min_size=1, max_size=6), st.sampled_from([0.05, 0.1]))
def test_step_down_settles_exactly_what_classical_holm_rejects(pvalues: list[float], alpha: float) -> None:
    names = [f"c{i}" for i in range(len(pvalues))]
    p = dict(zip(names, pvalues, strict=True))

    def decide(name: str, level: float) -> Outcome:
        return "pass" if p[name] <= level else "inconclusive"

    levels, steps = holm(names, alpha, decide)
    rejected = set()
    for rank, name in enumerate(sorted(names, key=lambda n: p[n])):
        if p[name] > alpha / (len(names) - rank):
            break
        rejected.add(name)
    assert {n for n, (_, step) in levels.items() if step is not None} == rejected
    assert all(s.alpha <= alpha for s in steps)
    assert correction_text(len(names), alpha, steps).count("step ") == len(steps) or len(names) == 1
