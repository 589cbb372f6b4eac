"""Paged reading for the streaming judgment: raw (unvalidated) rows, and only the rows
stored since a sequential run's last look (``Store.iter_new_exchanges``, ``IncrementalLooks``)."""

from __future__ import annotations

from pathlib import Path

from tests.support.records_factory import ab_run, arm, exchange, position, run_info

from abserve.compare import load_policy
from abserve.runs.looks import IncrementalLooks
from abserve.store import Store

POLICY = Path(__file__).resolve().parents[3] / "configs" / "policy" / "default.yaml"


def test_a_look_reads_only_what_was_stored_since_the_last_one(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'n.db'}") as store:
        store.create_run(run_info())
        first, second = ab_run(30)[:20], ab_run(30)[20:]
        store.write_exchanges(first)
        looks = IncrementalLooks(load_policy(POLICY))
        assert len(looks.update(store, "run-1")) == 20
        seen = looks.last_row
        store.write_exchanges(second)
        assert [e.request_id for _, e in store.iter_new_exchanges("run-1", seen)] == [
            e.request_id for e in second]
        assert len(looks.update(store, "run-1")) == 30
        assert looks.last_row > seen
        assert list(store.iter_new_exchanges("run-1", looks.last_row)) == []


def test_raw_rows_decode_minus_infinity_and_validate_to_the_record_written(tmp_path: Path) -> None:
    lps = [position(t, logprob=float("-inf") if t == 2 else -0.1) for t in (1, 2, 3)]
    sent = exchange(1, [arm(a, (1, 2, 3), logprobs=lps) for a in ("a", "b")])
    with Store.open(f"sqlite:///{tmp_path / 'r.db'}") as store:
        store.create_run(run_info())
        store.write_exchanges([sent])
        raw = next(store.iter_raw_exchanges("run-1"))
    chosen = raw.arms["a"].array("lp.lp")
    assert chosen is not None
    assert chosen[1] == float("-inf")
    assert raw.arms["a"].compare_key == raw.arms["b"].compare_key
    assert raw.full() == sent
