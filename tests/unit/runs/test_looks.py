"""Incremental looks (``abserve.runs.looks``): a look reads only what was stored since the
last one, finds rows that committed after a later row was read, never digests a row twice, and
the judgment over what the looks accumulated is the from-scratch judgment of the same store."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.records_factory import ab_run, run_info

from abserve.compare import load_policy
from abserve.compare.judge import judge_digest
from abserve.compare.policy import Policy
from abserve.model.records import Exchange
from abserve.report.evidence import wanted
from abserve.report.judging import judge_with_evidence
from abserve.runs.family import interim_family
from abserve.runs.looks import IncrementalLooks
from abserve.store import Store
from abserve.store.rows import exchange_row

POLICIES = Path(__file__).resolve().parents[3] / "configs" / "policy"
SEQUENTIAL = load_policy(POLICIES / "gpu.yaml")
N = 24
# b's tokens differ on some exchanges (mismatches), a2's on one (the floor sees one too)
RUN = ab_run(N, seed=3, candidate_tokens={2: [1, 2, 9], 11: [1, 2, 3, 7], 19: [5]}, floor_tokens={7: [1, 9]})


def write_with_ids(store: Store, exchanges: Sequence[Exchange], ids: Sequence[int]) -> None:
    """Commit ``exchanges`` in one transaction with the given row ids (as PostgreSQL hands ids
    out at insert time, a batch can commit after a batch holding larger ids)."""
    rows = [{**exchange_row(ex), "id": row_id} for ex, row_id in zip(exchanges, ids, strict=True)]
    with store.engine.begin() as conn:
        store.insert_rows(conn, rows)


def test_a_look_reads_only_the_rows_stored_since_the_last_one(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'l.db'}") as store:
        store.create_run(run_info())
        looks = IncrementalLooks(SEQUENTIAL)
        store.write_exchanges(RUN[:10])
        looks.update(store, "run-1")
        assert (len(looks.digest), looks.read_last_look) == (10, 10)
        store.write_exchanges(RUN[10:14])
        looks.update(store, "run-1")
        assert (len(looks.digest), looks.read_last_look, looks.late_rows) == (14, 4, 0)
        looks.update(store, "run-1")
        assert (len(looks.digest), looks.read_last_look) == (14, 0)


def test_a_row_that_commits_after_a_later_row_was_read_is_found_once(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'late.db'}") as store:
        store.create_run(run_info())
        looks = IncrementalLooks(SEQUENTIAL)
        write_with_ids(store, RUN[:4], [1, 2, 3, 4])
        write_with_ids(store, RUN[8:12], [9, 10, 11, 12])  # ids 5..8 taken by a batch still open
        looks.update(store, "run-1")
        assert (looks.last_row, len(looks.digest)) == (12, 8)
        write_with_ids(store, RUN[4:8], [5, 6, 7, 8])  # ... which commits now
        write_with_ids(store, RUN[12:14], [13, 14])
        looks.update(store, "run-1")
        assert (len(looks.digest), looks.read_last_look, looks.late_rows) == (14, 6, 4)
        looks.update(store, "run-1")
        assert looks.read_last_look == 0
        assert sorted(looks.digest.slim) == sorted(ex.request_id for ex in RUN[:14])


def test_a_late_exchange_of_another_run_is_not_taken(tmp_path: Path) -> None:
    other = ab_run(3, seed=5)
    for ex in other:
        ex.run_id = "run-2"
    with Store.open(f"sqlite:///{tmp_path / 'two.db'}") as store:
        store.create_run(run_info())
        store.create_run(run_info(run_id="run-2"))
        looks = IncrementalLooks(SEQUENTIAL)
        write_with_ids(store, RUN[:2], [1, 5])
        looks.update(store, "run-1")
        write_with_ids(store, other, [2, 3, 4])
        looks.update(store, "run-1")
        assert (len(looks.digest), looks.read_last_look) == (2, 0)


def judgments_agree(store: Store, looks: IncrementalLooks, policy: Policy) -> None:
    """The judgment of the accumulated digest is the from-scratch one of the same store
    (verdict, every line and number), and so are the exchanges the report shows in full."""
    run = store.get_run("run-1")
    assert run is not None
    incremental = judge_digest(run, looks.digest, policy)
    scratch, evidence = judge_with_evidence(store, "run-1", policy)
    assert incremental.model_dump_json() == scratch.model_dump_json()
    assert looks.digest.evidence(wanted(incremental)).keys() == evidence.keys()


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[int], list[list[int]], list[bool]]:
    """Row ids of the exchanges (their insert order, not their start order), the batches in
    commit order (exchange indices) and whether a look follows each batch."""
    ids = draw(st.permutations(range(1, N + 1)))
    commit = draw(st.permutations(range(N)))
    cuts = sorted(draw(st.sets(st.integers(1, N - 1), max_size=6)))
    batches = [list(commit[a:b]) for a, b in zip([0, *cuts], [*cuts, N], strict=True)]
    looks = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return list(ids), batches, looks


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories(), deferred=st.booleans())
def test_looks_over_any_commit_order_judge_as_a_fresh_read(tmp_path_factory: object, history: tuple[
        list[int], list[list[int]], list[bool]], deferred: bool) -> None:
    ids, batches, look_after = history
    policy = SEQUENTIAL.model_copy(update={"equality": SEQUENTIAL.equality.model_copy(
        update={"drift_floor_quantile": 0.9 if deferred else None})})
    path = Path(str(tmp_path_factory.mktemp("looks"))) / "h.db"  # type: ignore[attr-defined]
    with Store.open(f"sqlite:///{path}") as store:
        store.create_run(run_info())
        looks = IncrementalLooks(policy)
        for batch, look in zip(batches, look_after, strict=True):
            write_with_ids(store, [RUN[i] for i in batch], [ids[i] for i in batch])
            if look:
                looks.update(store, "run-1")
                stored = {raw.request_id for raw in store.iter_raw_exchanges("run-1")}
                assert set(looks.digest.slim) == stored
        looks.update(store, "run-1")
        assert len(looks.digest) == N
        judgments_agree(store, looks, policy)


def test_a_seeded_sweep_of_round_splits_judges_as_a_fresh_read(tmp_path: Path) -> None:
    rng = random.Random(30)
    for trial in range(3):
        cuts = sorted(rng.sample(range(1, N), 3))
        with Store.open(f"sqlite:///{tmp_path / f's{trial}.db'}") as store:
            store.create_run(run_info())
            looks = IncrementalLooks(SEQUENTIAL)
            for a, b in zip([0, *cuts], [*cuts, N], strict=True):
                store.write_exchanges(RUN[a:b])
                looks.update(store, "run-1")
                assert looks.read_last_look == b - a
            judgments_agree(store, looks, SEQUENTIAL)


@pytest.mark.postgres
def test_a_postgres_batch_that_took_its_ids_first_and_committed_last_is_found(pg_url: str) -> None:
    """Real concurrent transactions: ids come from a sequence at insert time, so the batch
    still open holds ids below the one committed after it."""
    with Store.open(pg_url) as store:
        store.create_run(run_info())
        looks = IncrementalLooks(SEQUENTIAL)
        with store.engine.connect() as slow:
            open_batch = slow.begin()
            store.insert_exchanges(slow, RUN[:3])
            store.write_exchanges(RUN[3:6])
            looks.update(store, "run-1")
            assert (len(looks.digest), looks.late_rows) == (3, 0)
            open_batch.commit()
        looks.update(store, "run-1")
        assert (len(looks.digest), looks.read_last_look, looks.late_rows) == (6, 3, 3)
        judgments_agree(store, looks, SEQUENTIAL)


def test_a_family_of_candidates_is_judged_from_its_looks_as_from_a_fresh_read(tmp_path: Path) -> None:
    family = ("a", ["b", "a2"], None)  # two candidates: Holm's step-down at two levels
    with Store.open(f"sqlite:///{tmp_path / 'family.db'}") as store:
        store.create_run(run_info())
        looks = IncrementalLooks(SEQUENTIAL, family)
        assert len(looks.family_digests) == 4
        write_with_ids(store, RUN[:8], range(1, 9))
        write_with_ids(store, RUN[12:], range(13, N + 1))
        looks.update(store, "run-1")
        write_with_ids(store, RUN[8:12], range(9, 13))  # committed late, below ids already read
        looks.update(store, "run-1")
        assert (looks.read_last_look, looks.late_rows) == (4, 4)
        assert all(len(digest) == N for digest in looks.family_digests.values())
        run = store.get_run("run-1")
        assert run is not None
        incremental = interim_family(run, looks, SEQUENTIAL, family)
        scratch = interim_family(run, list(store.iter_exchanges("run-1")), SEQUENTIAL, family)
    assert incremental.model_dump_json() == scratch.model_dump_json()


@pytest.mark.parametrize("family", [None, ("a", ["b", "a2"], None)])
def test_the_runs_look_after_each_round_judges_as_a_fresh_read(
        tmp_path: Path, family: tuple[str, list[str], None] | None) -> None:
    """``load_plan.judge_so_far``, the look ``abserve run`` takes after each round, with the
    run's looks and without (a fresh read of the store), round after round."""
    from abserve.arms.run_paths import RunPaths
    from abserve.runs.load_plan import judge_so_far

    paths = RunPaths(tmp_path)
    looks = IncrementalLooks(SEQUENTIAL, family)
    with Store.open(paths.database_url) as store:
        store.create_run(run_info())
        for a, b in ((0, 10), (10, 17), (17, N)):
            store.write_exchanges(RUN[a:b])
            kept = judge_so_far(paths, "run-1", b, SEQUENTIAL, family, None, looks)
            fresh = judge_so_far(paths, "run-1", b, SEQUENTIAL, family)
            assert looks.read_last_look == b - a
            assert kept.model_dump_json() == fresh.model_dump_json()
