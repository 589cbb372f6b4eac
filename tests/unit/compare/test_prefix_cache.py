"""The prefix-cache hit rate per arm, and a difference beyond the policy's threshold as a finding."""

from __future__ import annotations

from tests.support.conversation_runs import cached_run, conversation_policy, conversations

from abserve.compare import judge
from abserve.compare.policy import Policy, load_policy
from abserve.compare.prefix_cache import arm_rates, prefix_cache_finding
from abserve.model.provenance import BlockRecord, PrefixCacheCounts

LABELS = {"a": "linear (a)", "b": "linear+salt-prefix (b)"}


def blocks(*per_block: dict[str, tuple[int, int]]) -> list[BlockRecord]:
    return [BlockRecord(index=i, prefix_cache={arm: PrefixCacheCounts(queries=q, hits=h)
                                               for arm, (q, h) in counts.items()})
            for i, counts in enumerate(per_block)]


def test_rates_are_summed_over_the_blocks() -> None:
    rates = arm_rates(blocks({"a": (100, 60), "b": (100, 0)}, {"a": (300, 240)}, {}))
    assert (rates["a"].queries, rates["a"].hits, rates["a"].rate) == (400, 300, 0.75)
    assert rates["b"].rate == 0.0


def test_a_difference_beyond_the_threshold_is_flagged_with_both_rates_named() -> None:
    finding = prefix_cache_finding(blocks({"a": (1000, 700), "b": (1000, 0)}), conversation_policy(), LABELS)
    assert finding is not None
    assert finding.flagged
    assert finding.difference is not None
    assert round(finding.difference, 6) == -0.7
    assert finding.text.startswith("Prefix-cache hit rates differ between the arms: linear (a) 70.0% of "
                                   "1,000 prompt tokens, linear+salt-prefix (b) 0.0% of 1,000 prompt tokens "
                                   "(-70.0 points, beyond the 5 points the policy allows)")


def test_the_threshold_is_the_policys_and_within_it_nothing_is_flagged() -> None:
    near = blocks({"a": (1000, 700), "b": (1000, 660)})
    finding = prefix_cache_finding(near, conversation_policy(), LABELS)
    assert finding is not None
    assert not finding.flagged
    assert finding.text.startswith("Prefix-cache hit rates alike: ")
    strict = conversation_policy(prefix_cache={"max_hit_rate_difference": 0.02})
    assert strict.prefix_cache.max_hit_rate_difference == 0.02
    flagged = prefix_cache_finding(near, strict, LABELS)
    assert flagged is not None
    assert flagged.flagged
    assert flagged.threshold == 0.02


def test_no_counters_no_finding_and_one_unmeasured_arm_is_not_compared() -> None:
    assert prefix_cache_finding(blocks({}, {}), conversation_policy()) is None
    assert prefix_cache_finding([], conversation_policy()) is None
    one = prefix_cache_finding(blocks({"a": (1000, 700)}), conversation_policy())
    assert one is not None
    assert not one.flagged
    assert one.difference is None
    assert "arm b not measured" in one.text


def test_the_finding_changes_no_verdict() -> None:
    """Equal latency, different hit rates: the run passes and the finding is stated beside it."""
    exchanges = conversations(20)
    j = judge(cached_run((10_000, 7_000), (10_000, 0)), exchanges, conversation_policy())
    same = judge(cached_run(None, None), exchanges, conversation_policy())
    assert j.prefix_cache is not None
    assert j.prefix_cache.flagged
    assert same.prefix_cache is None
    assert (j.verdict, j.reasons) == (same.verdict, same.reasons)
    assert j.verdict == "pass", j.reasons


def test_a_policy_that_does_not_state_the_rule_keeps_its_bytes_and_digest() -> None:
    shipped = load_policy("configs/policy/cpu-default.yaml")
    assert "prefix_cache" not in shipped.model_dump()
    assert shipped.prefix_cache.max_hit_rate_difference == 0.05  # the default still applies
    stated = Policy.model_validate({**shipped.model_dump(mode="json"),
                                    "prefix_cache": {"max_hit_rate_difference": 0.05}})
    assert stated.model_dump()["prefix_cache"] == {"max_hit_rate_difference": 0.05}
    assert stated.digest() != shipped.digest()
    assert Policy.model_validate(shipped.model_dump(mode="json")).digest() == shipped.digest()
