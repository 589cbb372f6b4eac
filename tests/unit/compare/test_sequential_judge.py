"""The sequential judgment on synthetic runs with KNOWN answers.

Equality decides at once on a mismatch and passes only when its resolution is reached; the
shift gates pass an A/A' run and fail a real shift; the improvement and per-item gates see a
cost that grows with items; a cold arm is cut as warm-up, a drift makes a gate unstable, and
a run whose placement abserve did not control needs an effect beyond the assumed bias.
"""

from __future__ import annotations

import numpy as np
from tests.support.records_factory import arm, exchange, run_info

from abserve.compare import Policy, judge
from abserve.compare.gates import stop_now
from abserve.compare.model import Judgment
from abserve.compare.warmup import mser_cut
from abserve.model.records import Exchange

TOKENS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]


def policy(**kw: object) -> Policy:
    base: dict[str, object] = {
        "arms": {"baseline": "a", "candidate": "b", "floor": None},
        "min_samples": 20,
        "warmup_requests": 0,
        "mode": "sequential",
        "sequential": {"look_every": 8, "warmup": "fixed"},
        "equality": {"resolution": 0.10},
        "metrics": [{"metric": "tpot", "allowed_relative": 0.05, "critical": True},
                    {"metric": "ttft", "allowed_relative": 0.05, "critical": True}],
    }
    base.update(kw)
    return Policy.model_validate(base)


def run(n: int, *, shift: float = 0.0, per_item: float = 0.0, seed: int = 0, sd: float = 0.0003,
        cold: int = 0, drift_at: int | None = None, placement: str | None = "a:0,b:0",
        bad_tokens: set[int] | None = None) -> list[Exchange]:
    """``n`` exchanges; b's gap per token = a's + ``shift`` + ``per_item`` x items (+ noise).

    ``cold``: b's first ``cold`` requests are slow (falling from 8x to 1x); ``drift_at``: from
    that index on b's gap grows by a further 2 ms; ``bad_tokens``: indices where b differs.
    """
    rng = np.random.default_rng(seed)
    items_cycle = [2, 8, 128, 512]
    out = []
    for i in range(n):
        items = items_cycle[i % len(items_cycle)]
        common = 0.012 + rng.normal(0, 0.001)
        gap_b = common + shift + per_item * items + rng.normal(0, sd)
        if drift_at is not None and i >= drift_at:
            gap_b += 0.002
        ttft_b = 0.4 + rng.normal(0, 0.004)
        if i < cold:
            factor = 1 + 7 * (cold - i) / cold
            gap_b, ttft_b = gap_b * factor, ttft_b * factor
        tokens_b = [99, *TOKENS[1:]] if bad_tokens and i in bad_tokens else TOKENS
        tags = {"block": str(i // 8)} | ({"placement": placement} if placement else {})
        out.append(exchange(i, [arm("a", TOKENS, ttft=0.4 + rng.normal(0, 0.004), itl=common),
                                arm("b", tokens_b, ttft=ttft_b, itl=gap_b)],
                            items=items, profile="mixed", extra_tags=tags))
    return out


def judged(exchanges: list[Exchange], p: Policy | None = None) -> Judgment:
    return judge(run_info({"a": run_info().arms["a"], "b": run_info().arms["b"]}), exchanges, p or policy())


def line(j: Judgment, name: str) -> tuple[str, float | None, float | None]:
    m = next(m for m in j.metrics if m.name == name)
    return m.outcome, m.low, m.high


def test_aa_run_passes_and_every_gate_is_anytime() -> None:
    j = judged(run(96))
    assert j.sequential
    assert j.looks == 12
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "pass"
    assert line(j, "tpot.hl")[0] == "pass"
    assert line(j, "ttft.hl")[0] == "pass"
    tpot = next(m for m in j.metrics if m.name == "tpot.hl")
    assert len(tpot.trajectory) == 12
    assert tpot.method == "anytime-pooled"
    widths = [lk.high - lk.low for lk in tpot.trajectory if lk.low is not None and lk.high is not None]
    assert widths[-1] < widths[0] / 2
    assert j.verdict == "pass"


def test_rare_interference_spikes_on_one_arm_do_not_decide_an_aa_run() -> None:
    exchanges = run(96, seed=4)
    for i in (10, 40, 70):  # another process stalled b's steps: +20 ms per token on 3 requests
        b = exchanges[i].arms["b"]
        b.token_times = [t + 0.02 * k for k, t in enumerate(b.token_times)]
        b.t_end = b.token_times[-1] + 0.001 if b.t_end is not None else None
    j = judged(exchanges)
    tpot = next(m for m in j.metrics if m.name == "tpot.hl")
    assert tpot.outcome == "pass"
    assert "3 of 96 pair differences winsorized" in tpot.reason
    raw = judged(exchanges, policy(sequential={"look_every": 8, "warmup": "fixed", "clip": 0}))
    assert next(m for m in raw.metrics if m.name == "tpot.hl").outcome != "pass"


def test_equality_fails_on_the_first_mismatch_naming_it_and_needs_its_resolution_to_pass() -> None:
    j = judged(run(24, bad_tokens={5}))
    eq = j.equality_verdict
    assert eq is not None
    assert eq.outcome == "fail"
    assert "req-00005" in eq.reason
    assert j.verdict == "fail"
    few = judged(run(24)).equality_verdict
    assert few is not None
    assert few.outcome == "inconclusive"
    assert "resolution" in few.reason


def test_a_real_shift_fails_and_the_run_may_stop() -> None:
    j = judged(run(64, shift=0.003))
    outcome, low, _ = line(j, "tpot.hl")
    assert outcome == "fail"
    assert low is not None
    assert low > 0.0006
    assert stop_now([("tpot.hl", True, "fail"), ("ttft.hl", True, "inconclusive")])
    assert not stop_now([("tpot.hl", True, "pass"), ("ttft.hl", True, "inconclusive")])


def test_improvement_and_per_item_gates_see_a_cost_that_grows_with_items() -> None:
    p = policy(improvements=[{"metric": "tpot", "min_items": 128, "critical": True}],
               per_item=[{"metric": "tpot", "allowed": 0.0}])
    j = judged(run(96, per_item=-4e-6), p)
    improvement = next(m for m in j.metrics if m.kind == "improvement")
    assert improvement.outcome == "pass"
    assert improvement.n == 48
    assert improvement.stratum == ">= 128 items"
    per_item = next(m for m in j.metrics if m.kind == "per_item")
    assert per_item.outcome == "pass"
    assert per_item.low is not None
    assert per_item.low < -4e-6 < (per_item.high or 0)
    none = judged(run(96), p)
    assert next(m for m in none.metrics if m.kind == "improvement").outcome == "inconclusive"
    slower = judged(run(96, shift=0.002), p)
    assert next(m for m in slower.metrics if m.kind == "improvement").outcome == "fail"


def test_a_cold_arm_fails_the_old_judgment_and_is_cut_by_the_detected_warmup() -> None:
    exchanges = run(120, cold=40, seed=3)
    old = judged(exchanges, policy(warmup_requests=4, mode="fixed", sequential={}))
    # the fixed-count judgment blames the candidate for being cold (exit 1 or 2 blocks a release)
    assert old.verdict in ("fail", "marginal"), [m.reason for m in old.metrics]
    assert all(m.estimate is not None and m.estimate > (m.threshold or 0) for m in old.metrics)
    auto = judged(exchanges, policy(warmup_requests=4, sequential={"look_every": 8, "warmup": "auto"}))
    assert auto.exchanges_warmup >= 30
    assert "MSER-5" in auto.warmup_detail
    assert auto.verdict == "pass", [m.reason for m in auto.metrics]


def test_a_drift_halfway_makes_the_gate_unstable_unless_accepted() -> None:
    exchanges = run(128, drift_at=64, seed=5, shift=-0.001)
    guarded = judged(exchanges)
    tpot = next(m for m in guarded.metrics if m.name == "tpot.hl")
    assert tpot.outcome == "unstable"
    assert tpot.drift is not None
    assert tpot.drift.unstable
    assert guarded.verdict == "inconclusive"
    accepted = judged(exchanges, policy(sequential={"look_every": 8, "drift": "accept", "warmup": "fixed"}))
    assert line(accepted, "tpot.hl")[0] in ("pass", "fail", "marginal")


def test_unknown_placement_needs_an_effect_beyond_the_assumed_bias() -> None:
    exchanges = run(96, shift=0.0012, placement=None)
    p = policy(sequential={"look_every": 8, "warmup": "fixed",
                           "unknown_placement_bias": {"tpot": 0.002}})
    j = judged(exchanges, p)
    tpot = next(m for m in j.metrics if m.name == "tpot.hl")
    assert not j.placement_known
    assert tpot.outcome == "inconclusive"
    assert "placement" in tpot.reason
    strong = judged(run(96, shift=0.006, placement=None), p)
    assert line(strong, "tpot.hl")[0] == "fail"


def test_mser_cut_finds_a_transient_and_leaves_a_stationary_series_alone() -> None:
    rng = np.random.default_rng(0)
    cuts = [mser_cut(list(np.exp(rng.normal(0.0, 0.3, 80)))) for _ in range(400)]
    assert sum(c > 0 for c in cuts) / len(cuts) < 0.05  # stationary noise is (almost) never cut
    steady = list(rng.normal(1.0, 0.05, 200))
    assert mser_cut(steady) == 0
    transient = [1.0 + 4.0 * np.exp(-i / 6) for i in range(40)] + steady
    assert 15 <= mser_cut(transient) <= 60
