"""Foreign load on the arms' cores (``compare/contamination.py``): beyond the policy's share it
turns latency decisions into "cannot tell" (or the run invalid), never a regression into a pass;
equality is untouched; a fail stays a fail."""

from __future__ import annotations

from tests.support.records_factory import arm, exchange, provenance, run_info

from abserve.compare import judge, load_policy
from abserve.compare.contamination import apply_contamination, contamination, describe_core
from abserve.compare.model import MetricLine
from abserve.compare.policy import ArmRoles, NeighbourRule
from abserve.model.provenance import BlockNeighbours, BlockRecord, CoreLoad, RunProvenance
from abserve.model.records import Exchange, RunInfo

POLICY = load_policy("configs/policy/default.yaml")


def core(foreign: float, threads: int = 6) -> CoreLoad:
    return CoreLoad(busy=0.9, arms=0.9 - foreign, foreign=foreign, foreign_threads=threads,
                    top=[("VLLM::Worker", foreign * 0.8), ("python", foreign * 0.2)])


def blocks(*shares: float) -> RunProvenance:
    """A run's provenance whose block ``i`` saw the foreign share ``shares[i]`` on core 0."""
    return RunProvenance(blocks=[
        BlockRecord(index=i, neighbours=BlockNeighbours(seconds=10.0, cores={"0": core(s), "1": core(0.05)}))
        for i, s in enumerate(shares)])


def line(outcome: str) -> MetricLine:
    return MetricLine(name="tpot.hl", metric="tpot", statistic="hl", direction="increase", critical=True,
                      n=40, confidence=0.95, outcome=outcome, reason="r")


def test_the_run_facts_sentence_names_share_and_threads() -> None:
    text = describe_core("0", core(0.38))
    assert text.startswith("core 0: 38% of its time went to 6 threads outside the arms")
    assert "VLLM::Worker 30%" in text
    assert describe_core("1", CoreLoad(foreign=0.0, foreign_threads=1)) == (
        "core 1: 0% of its time went to 1 thread outside the arms")


def test_the_worst_block_of_each_core_is_reported() -> None:
    found = contamination(blocks(0.1, 0.62, 0.2))
    assert found is not None
    assert found.share == 0.62
    assert found.where.endswith("in block 1")
    assert len(found.facts) == 2  # one per core
    assert "(the worst of 3 blocks; mean 31%)" in found.facts[0]
    assert contamination(RunProvenance(blocks=[BlockRecord(index=0)])) is None
    assert contamination(RunProvenance()) is None


def test_beyond_the_share_every_latency_line_is_cannot_tell() -> None:
    lines = [line("pass"), line("inconclusive"), line("marginal"), line("fail")]
    invalid: list[str] = []
    apply_contamination(lines, invalid, blocks(0.6), NeighbourRule(max_foreign_share=0.5))
    assert [m.outcome for m in lines] == ["unstable"] * 4
    assert all("cannot tell: foreign load on the arms' cores: core 0: 60%" in m.reason for m in lines)
    assert invalid == []


def test_neighbours_widen_a_fail_but_do_not_erase_one_beyond_the_largest_measured_bias() -> None:
    """Issue 58: a shift fail whose interval clears its allowance plus ``neighbours.widen`` stays a
    fail; one the bias could explain, or of a metric without a measured bias, is cannot tell."""
    def failed(metric: str, low: float) -> MetricLine:
        got = line("fail")
        got.metric, got.name, got.low, got.threshold = metric, f"{metric}.hl", low, 0.001
        return got
    far, near, ttft = failed("tpot", 0.0081), failed("tpot", 0.0070), failed("ttft", 0.500)
    rule = NeighbourRule(max_foreign_share=0.5)
    assert rule.widen == {"tpot": 0.0065}
    apply_contamination([far, near, ttft], [], blocks(0.8), rule)
    assert (far.outcome, near.outcome, ttft.outcome) == ("fail", "unstable", "unstable")
    assert "beyond its allowance by more than the largest bias neighbours were measured to cause (6.500 ms)" \
        in far.reason
    assert near.cause is not None
    assert near.cause.kind == "neighbours"


def test_keep_fails_keeps_a_fail_naming_the_neighbours() -> None:
    lines = [line("pass"), line("fail")]
    apply_contamination(lines, [], blocks(0.6), NeighbourRule(keep_fails=True))
    assert [m.outcome for m in lines] == ["unstable", "fail"]
    assert "a fail despite foreign load on the arms' cores" in lines[1].reason


def test_below_the_share_or_without_a_threshold_nothing_changes() -> None:
    cases = ((NeighbourRule(max_foreign_share=0.5), 0.5), (NeighbourRule(max_foreign_share=None), 0.99))
    for rule, share in cases:
        lines = [line("pass")]
        found = apply_contamination(lines, [], blocks(share), rule)
        assert lines[0].outcome == "pass"
        assert lines[0].reason == "r"
        assert found is not None  # the facts are reported all the same


def test_action_invalid_voids_the_run_naming_the_neighbours() -> None:
    invalid: list[str] = []
    lines = [line("pass")]
    apply_contamination(lines, invalid, blocks(0.7), NeighbourRule(action="invalid"))
    assert lines[0].outcome == "pass"
    assert len(invalid) == 1
    assert "6 threads outside the arms" in invalid[0]


def ab_info() -> RunInfo:
    return run_info({"a": provenance("linear"), "b": provenance("bisect")})


def passing_run(n: int = 60) -> list[Exchange]:
    return [exchange(i, [arm("a", ttft=0.05, itl=0.01), arm("b", ttft=0.05, itl=0.01)]) for i in range(n)]


def contaminated(shares: tuple[float, ...]) -> RunInfo:
    run = ab_info()
    run.provenance = blocks(*shares)
    return run


def test_judge_turns_a_pass_into_cannot_tell_and_keeps_equality() -> None:
    clean = judge(ab_info(), passing_run(), POLICY)
    assert clean.verdict == "pass"
    assert clean.neighbours == []
    dirty = judge(contaminated((0.2, 0.8)), passing_run(), POLICY)
    assert dirty.verdict == "inconclusive"
    assert {m.outcome for m in dirty.metrics} == {"unstable"}
    assert dirty.equality_verdict is not None
    assert dirty.equality_verdict.outcome == "pass"
    assert dirty.neighbours[0].startswith("core 0: 80% of its time went to 6 threads outside the arms")
    light = judge(contaminated((0.2, 0.3)), passing_run(), POLICY)
    assert light.verdict == "pass"
    assert len(light.neighbours) == 2


def test_judge_never_passes_a_regression_and_keeps_it_failing_only_beyond_the_bias_or_when_told() -> None:
    slow = [exchange(i, [arm("a", ttft=0.05, itl=0.01), arm("b", ttft=0.05, itl=0.014)]) for i in range(60)]
    assert judge(ab_info(), slow, POLICY).verdict == "fail"
    judged = judge(contaminated((0.9,)), slow, POLICY)
    assert judged.verdict == "inconclusive"  # +4 ms per token: within what neighbours can cause
    slower = [exchange(i, [arm("a", ttft=0.05, itl=0.01), arm("b", ttft=0.05, itl=0.02)]) for i in range(60)]
    widened = judge(contaminated((0.9,)), slower, POLICY)
    assert widened.verdict == "fail"  # +10 ms: beyond the allowance plus the 6.5 ms neighbours can cause
    keep = POLICY.model_copy(update={"neighbours": NeighbourRule(keep_fails=True)})
    kept = judge(contaminated((0.9,)), slow, keep)
    tpot = next(m for m in kept.metrics if m.metric == "tpot")
    assert kept.verdict == "fail"
    assert "a fail despite foreign load" in tpot.reason


def test_the_stop_reason_says_neighbours_not_drift() -> None:
    from abserve.runs.rounds import decision_needs

    judged = judge(contaminated((0.2, 0.8)), passing_run(), POLICY)
    needs = decision_needs(judged, 60, 1.0)
    assert "tpot.hl (unstable: foreign load on the arms' cores)" in needs


def test_a_tail_fail_beside_neighbours_stays_a_fail_only_where_a_bias_was_measured() -> None:
    """Issue 58: a 300 ms stall after the first token on one request in four fails ``tpot.p99`` with
    each request's allowance widened by ``neighbours.widen`` (6.5 ms per token), so foreign load
    beyond the share keeps it a fail; ``e2e.p99`` has no measured bias and becomes unstable."""
    from tests.support.stall_runs import run as stall_run

    policy = load_policy("configs/policy/aa-default.yaml").model_copy(
        update={"arms": ArmRoles(baseline="a", candidate="b", floor=None)})
    info = ab_info()
    info.provenance = blocks(0.8)
    judged = judge(info, stall_run(96, decode_stall=0.3, every=4), policy)
    outcomes = {m.name: m.outcome for m in judged.metrics}
    assert outcomes["tpot.p99"] == "fail"
    assert outcomes["e2e.p99"] == "unstable"
    assert judged.verdict == "fail"
    tpot = next(m for m in judged.metrics if m.name == "tpot.p99")
    assert "more than the largest bias neighbours were measured to cause" in tpot.reason
    assert "fail_beyond_neighbours" not in judged.model_dump(mode="json")["metrics"][0]
