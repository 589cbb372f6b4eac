"""The streaming digest judges exactly as the whole-run path did, in bounded memory.

The reference is the pre-digest roll-up (``aggregate.pair_results`` + ``equality_line`` over
full exchanges, and ``drift_tolerance``), still in ``abserve.compare.aggregate``; the digest
must give the same equality lines on mismatching, drifting and deferred-tolerance runs, the
same judgment fed in pieces as at once, and keep only a bounded few full records.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, arm, exchange, position, run_info

from abserve.compare import Policy, judge, load_policy
from abserve.compare.aggregate import MAX_EXAMPLES, drift_tolerance, equality_line, pair_results
from abserve.compare.digest import Digester
from abserve.compare.judge import judge_digest
from abserve.model.records import Exchange, SlimOutcome

REPO = Path(__file__).resolve().parents[3]


def _policy(name: str = "default") -> Policy:
    return load_policy(REPO / "configs" / "policy" / f"{name}.yaml")


def _drifting(n: int, start: int = 0) -> list[Exchange]:
    """Runs where the candidate and the floor drift a little on some exchanges."""
    out = []
    for i in range(start, start + n):
        toks = [1, 2, 3, 4, 5, 6, 7, 8]
        b_lp = [position(t, logprob=-0.1 - (1e-4 if i % 3 == 0 and p == 2 else 0.0))
                for p, t in enumerate(toks)]
        f_lp = [position(t, logprob=-0.1 - (5e-5 if i % 4 == 0 and p == 5 else 0.0))
                for p, t in enumerate(toks)]
        b_toks = [1, 2, 9, 4, 5, 6, 7, 8] if i % 17 == 5 else toks
        b_lp = b_lp if b_toks == toks else [position(t) for t in b_toks]
        arms = [arm("a", toks), arm("b", b_toks, logprobs=b_lp), arm("a2", toks, logprobs=f_lp)]
        out.append(exchange(i, arms))
    return out


def _reference(exchanges: list[Exchange], policy: Policy, floor: str | None) -> list[dict[str, object]]:
    tol = drift_tolerance(exchanges, policy, floor)
    roles = policy.arms
    return [equality_line(pair_results(exchanges, roles.baseline, o, tol), roles.baseline, o, policy)
            .model_dump() for o in (roles.candidate, floor) if o]


def _digested(exchanges: list[Exchange], policy: Policy, floor: str | None) -> list[dict[str, object]]:
    digest = Digester(policy)
    digest.feed(exchanges)
    ordered = digest.ordered()
    tol = digest.tolerance(ordered, floor)
    roles = policy.arms
    return [digest.equality_line(ordered, roles.baseline, o, tol).model_dump()
            for o in (roles.candidate, floor) if o]


@pytest.mark.parametrize("policy_name", ["default", "embed-fault-proof"])
@pytest.mark.parametrize("kind", ["mismatches", "drift"])
def test_the_digest_rolls_up_equality_as_the_full_records_did(policy_name: str, kind: str) -> None:
    policy = _policy(policy_name)
    if kind == "mismatches":
        bad = {i: [1, 2, 3, 9, 5, 6, 7, 8] for i in range(0, 120, 3)}
        exchanges = ab_run(120, candidate_tokens=bad, floor_tokens={7: [2, 2, 3, 4, 5, 6, 7, 8]})
    else:
        exchanges = _drifting(90)
    floor = policy.arms.floor
    assert _digested(exchanges, policy, floor) == _reference(exchanges, policy, floor)


def test_a_digest_fed_round_by_round_judges_as_one_fed_at_once() -> None:
    policy = _policy("default")
    exchanges = ab_run(150, itl_shift=0.001, candidate_tokens={40: [1, 2, 9, 4, 5, 6, 7, 8]})
    whole = judge(run_info(), exchanges, policy)
    digest = Digester(policy)
    for start in range(0, 150, 40):
        assert digest.feed(exchanges[start:start + 40]) == len(exchanges[start:start + 40])
        judge_digest(run_info(), digest, policy)  # a look after each round
    assert digest.feed(exchanges[:10]) == 0  # seen before: no-op
    assert judge_digest(run_info(), digest, policy).model_dump() == whole.model_dump()


def test_only_the_earliest_mismatches_are_kept_in_full() -> None:
    policy = _policy("default")
    bad = {i: [1, 2, 3, 9, 5, 6, 7, 8] for i in range(300)}
    exchanges = ab_run(300, candidate_tokens=bad)
    digest = Digester(policy)
    digest.feed(reversed(exchanges))  # any feeding order keeps the earliest
    kept = digest.kept[(policy.arms.baseline, policy.arms.candidate)]
    assert len(kept.items) == MAX_EXAMPLES + policy.warmup_requests
    j = judge_digest(run_info(), digest, policy)
    examples = [x.request_id for x in j.equality[0].examples]
    first = policy.warmup_requests
    assert examples == [f"req-{i:05d}" for i in range(first, first + MAX_EXAMPLES)]
    assert set(digest.evidence(set(examples))) == set(examples)
    assert j.equality[0].summary.mismatches == 300 - policy.warmup_requests


def test_a_digested_exchange_keeps_no_token_level_data() -> None:
    digest = Digester(_policy("default"))
    digest.feed(ab_run(5))
    for ex in digest.ordered():
        slims = [o for o in ex.arms.values() if isinstance(o, SlimOutcome)]
        assert len(slims) == len(ex.arms) == 3
        assert all(o.tokens == 8 and o.has_tokens for o in slims)
    assert all(rl is None or rl.gaps == () for per in digest.latencies.values() for rl in per.values())


def test_identical_exchanges_cost_a_bounded_few_bytes_each() -> None:
    """64 tokens, top-5, 3 arms: the full records are ~0.5 MB each as models; a digest ~420 B
    (its request id, one small object and narrow typed columns: ``abserve.compare.slim``)."""
    policy = _policy("default")
    toks = list(range(10, 74))
    arms = [arm(a, toks) for a in ("a", "b", "a2")]  # built once, untraced: the digest is measured

    def page(start: int) -> list[Exchange]:
        return [exchange(i, arms) for i in range(start, start + 100)]

    digest = Digester(policy)
    digest.feed(page(0))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for start in range(100, 600, 100):
        digest.feed(page(start))
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown / 500 < 470, f"{grown / 500:.0f} bytes per digested exchange"  # ~420; f35f2d0 ~520


@pytest.mark.parametrize("policy_name", ["default", "embed-fault-proof"])
def test_digesting_decoded_rows_judges_as_digesting_models(policy_name: str, tmp_path: Path) -> None:
    """The store's unvalidated rows (identical pairs read as plain lists, the rest in full)
    give the judgment of the validated exchanges, -inf logprobs and mismatches included."""
    from abserve.store import Store

    policy = _policy(policy_name)
    inf_lp = [position(t, logprob=float("-inf") if t == 3 else -0.1) for t in (1, 2, 3, 4)]
    exchanges = ab_run(80, candidate_tokens={i: [1, 2, 9, 4, 5, 6, 7, 8] for i in range(0, 80, 9)})
    exchanges += _drifting(30, start=100)
    exchanges.append(exchange(200, [arm(a, (1, 2, 3, 4), logprobs=inf_lp) for a in ("a", "b", "a2")]))
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create_run(run_info())
        store.write_exchanges(exchanges)
        raw = Digester(policy)
        raw.feed_raw(store.iter_raw_exchanges("run-1"))
        validated = Digester(policy)
        validated.feed(store.iter_exchanges("run-1"))
    got = judge_digest(run_info(), raw, policy).model_dump()
    assert got == judge_digest(run_info(), validated, policy).model_dump()
    assert got["equality"][0]["summary"]["mismatches"] > 0


def test_kept_mismatches_of_stored_rows_hold_the_rows_not_validated_exchanges(tmp_path: Path) -> None:
    """A kept mismatch read from the store holds what rebuilds its exchange (the row), not
    its validated ``Exchange`` (per-token models: ~0.5 MB at 64 tokens, top-5); the report's
    evidence is the stored exchange all the same."""
    from abserve.store import Store

    policy = _policy("default")
    exchanges = ab_run(60, candidate_tokens={i: [1, 2, 9, 4, 5, 6, 7, 8] for i in range(60)})
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create_run(run_info())
        store.write_exchanges(exchanges)
        digest = Digester(policy)
        digest.feed_raw(store.iter_raw_exchanges("run-1"))
        stored = {ex.request_id: ex for ex in store.iter_exchanges("run-1")}
    kept = digest.kept[(policy.arms.baseline, policy.arms.candidate)]
    assert len(kept.items) == MAX_EXAMPLES + policy.warmup_requests
    assert not any(isinstance(held, Exchange) for _, held in kept.items)
    ids = {r.request_id for r, _ in kept.items}
    assert digest.evidence(ids) == {rid: stored[rid] for rid in ids}
