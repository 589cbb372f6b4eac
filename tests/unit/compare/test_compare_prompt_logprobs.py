"""Prompt logprobs (issue 9, item 2): a sampled exchange whose outputs agree but whose prompt
logprobs moved after one image is ``drift``, named in the report; A/A' stays clean."""

from __future__ import annotations

from tests.support.records_factory import ab_run, position, run_info

from abserve.compare import Policy, judge
from abserve.compare.equality import compare_pair
from abserve.compare.policy import MetricRule
from abserve.model.records import ArmOutcome, Exchange, PositionLogprobs
from abserve.report.writer import write_report

PROMPT_LEN = 40


def prompt(shift_from: int | None = None, delta: float = 0.004) -> list[PositionLogprobs]:
    """Prompt logprobs of a 40-token prompt; from ``shift_from`` on every logprob moved."""
    out = []
    for i in range(PROMPT_LEN):
        moved = shift_from is not None and i >= shift_from
        out.append(position(1000 + i, logprob=-1.0 - 0.01 * i + (delta if moved else 0.0)))
    return out


def sample(ex: Exchange, arms: dict[str, list[PositionLogprobs]]) -> None:
    for name, lps in arms.items():
        ex.arms[name].prompt_logprobs = lps


def policy(**eq: object) -> Policy:
    return Policy.model_validate({"metrics": [MetricRule(metric="tpot", critical=True)], "equality": eq})


def _outcome(name: str, lps: list[PositionLogprobs] | None) -> ArmOutcome:
    out = ArmOutcome(arm=name, status=200, token_ids=[5, 6], logprobs=[position(5), position(6)],
                     finish_reason="length")
    out.prompt_logprobs = lps
    return out


def test_same_output_but_moved_prompt_logprobs_is_drift_at_the_first_moved_position() -> None:
    r = compare_pair("r1", "a", "b", _outcome("a", prompt()), _outcome("b", prompt(17)))
    assert r.cls == "drift"
    assert r.drift_position is None
    assert r.prompt_drift_position == 17
    assert r.prompt_positions == PROMPT_LEN
    assert r.prompt_logprob_delta is not None
    assert abs(r.prompt_logprob_delta - 0.004) < 1e-9


def test_bitwise_equal_prompts_stay_identical_and_unsampled_sides_are_not_compared() -> None:
    same = compare_pair("r1", "a", "b", _outcome("a", prompt()), _outcome("b", prompt()))
    assert same.cls == "identical"
    assert same.prompt_logprob_delta == 0.0
    one_side = compare_pair("r2", "a", "b", _outcome("a", prompt()), _outcome("b", None))
    assert one_side.cls == "identical"
    assert one_side.prompt_positions is None


def test_tolerance_absorbs_small_prompt_moves_and_a_shorter_prompt_drifts_where_it_ends() -> None:
    r = compare_pair("r1", "a", "b", _outcome("a", prompt()), _outcome("b", prompt(3, 1e-6)),
                     drift_tolerance=1e-5)
    assert r.cls == "identical"
    short = compare_pair("r2", "a", "b", _outcome("a", prompt()), _outcome("b", prompt()[:30]))
    assert short.cls == "drift"
    assert short.prompt_drift_position == 30


def test_prompt_drift_on_big_requests_fails_the_run_and_names_them_while_aa_is_clean(tmp_path) -> None:
    runs = ab_run(80)  # items cycle 1, 4, 16, 64
    hit = []
    for ex in runs[1::2]:  # half the exchanges sampled (items 4 and 64)
        faulty = ex.tags["items"] == "64"
        sample(ex, {"a": prompt(), "a2": prompt(), "b": prompt(20) if faulty else prompt()})
        hit += [ex.request_id] if faulty else []
    assert hit
    j = judge(run_info(), runs, policy())
    e, floor = j.equality
    assert e.prompt_sampled == 40
    assert e.prompt_drifts == len(hit) == e.prompt_only_drifts
    assert e.summary.counts["drift"] == len(hit)
    assert e.prompt_drift_by_position == {"20": len(hit)}
    assert {x.request_id for x in e.examples} == set(hit)
    assert floor.prompt_sampled == 40
    assert floor.prompt_drifts == 0
    assert floor.summary.counts["identical"] == 80
    assert j.equality_verdict is not None
    assert j.equality_verdict.outcome == "fail"
    write_report(j, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert f"40 exchanges sampled, {len(hit)} drifted in the prompt" in md
    assert all(f"`{rid}`" in md for rid in hit)
    assert "prompt-logprobs" in (tmp_path / "report.html").read_text()


def test_floor_tolerance_counts_the_prompt_drift_the_same_build_shows() -> None:
    runs = ab_run(60)
    for ex in runs:
        sample(ex, {"a": prompt(), "a2": prompt(5, 2e-4), "b": prompt(5, 2e-4)})
    j = judge(run_info(), runs, policy(drift_floor_quantile=1.0))
    assert j.equality_verdict is not None
    assert j.equality_verdict.drift_tolerance >= 2e-4
    assert j.equality[0].summary.counts["identical"] == 60
