"""Store: runs and exchanges read back exactly, ordering, schema versions, bad input.

Every test runs on SQLite and on PostgreSQL (the ``store`` fixture is parametrized).
"""

from __future__ import annotations

import math
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from tests.support.records_factory import full_exchange as exchange
from tests.support.records_factory import full_outcome as outcome
from tests.support.records_factory import full_run_info as run_info

from abserve.model.provenance import RunProvenance
from abserve.model.records import SCHEMA_VERSION, ArmOutcome, Exchange, RunInfo
from abserve.store import (
    RunExistsError,
    RunNotFoundError,
    Store,
    StoreSchemaError,
)
from abserve.store.schema import meta_table


def _non_default_fields(model: Exchange | ArmOutcome | RunInfo) -> None:
    """Guard: the sample sets every field, so a field added later cannot go untested."""
    for name, field in type(model).model_fields.items():
        if name in ("schema_version", "status"):
            continue
        default = field.get_default(call_default_factory=True)
        assert getattr(model, name) != default, f"sample leaves {type(model).__name__}.{name}"


def test_exchange_round_trips_every_field(store: Store) -> None:
    store.create_run(run_info("r1"))
    sent = [exchange("r1", i) for i in range(3)]
    _non_default_fields(sent[0])
    _non_default_fields(sent[0].arms["a"])
    store.write_exchanges(sent)
    got = list(store.iter_exchanges("r1"))
    assert got == sent
    assert got[0].arms["a"].logprobs[0].logprob == -math.inf
    assert [e.model_dump_json() for e in got] == [e.model_dump_json() for e in sent]


finite = st.floats(allow_nan=False)
words = st.text(max_size=20)


@st.composite
def outcomes(draw: st.DrawFn) -> ArmOutcome:
    base = outcome("a", draw(st.integers(0, 5)))
    return base.model_copy(
        update={
            "t_send": draw(finite),
            "t_first_token": draw(st.none() | finite),
            "token_times": draw(st.lists(finite, max_size=8)),
            "text": draw(st.text(max_size=40)),
            "token_ids": draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8)),
            "usage": draw(st.none() | st.dictionaries(words, st.integers(0, 2**40))),
            # missing token data: none, or an empty list where None differs from []
            "logprobs": draw(st.sampled_from([[], base.logprobs])),
            "prompt_logprobs": draw(st.sampled_from([None, [], base.prompt_logprobs])),
        }
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    arms=st.dictionaries(st.sampled_from(["a", "b", "a2"]), outcomes(), min_size=1),
    tags=st.dictionaries(words, words, max_size=4),
    started_at=finite,
    prompt=st.none() | st.text(max_size=50),
)
def test_random_exchanges_round_trip(
    store: Store,
    arms: dict[str, ArmOutcome],
    tags: dict[str, str],
    started_at: float,
    prompt: str | None,
) -> None:
    if store.get_run("rh") is None:
        store.create_run(run_info("rh"))
    before = store.count_exchanges("rh")
    sent = exchange("rh", before).model_copy(
        update={"arms": arms, "tags": tags, "started_at": started_at, "prompt_text": prompt}
    )
    store.write_exchanges([sent])
    got = [e for e in store.iter_exchanges("rh") if e.request_id == sent.request_id]
    assert got == [sent]


def test_run_lifecycle(store: Store) -> None:
    sent = run_info("r1")
    _non_default_fields(sent)
    store.create_run(sent)
    assert store.get_run("r1") == sent
    assert store.get_run("missing") is None
    with pytest.raises(RunExistsError):
        store.create_run(sent)

    changed = sent.model_copy(update={"provenance": RunProvenance.model_validate({"added": "later"}),
                                      "config": {"x": 1}})
    store.update_run(changed)
    assert store.get_run("r1") == changed

    store.finish_run("r1", "completed")
    done = store.get_run("r1")
    assert done is not None
    assert done.status == "completed"
    assert done.ended_at is not None
    assert done.provenance.model_dump() == {"added": "later"}

    store.create_run(run_info("r0").model_copy(update={"started_at": 1.0}))
    assert [r.run_id for r in store.list_runs()] == ["r0", "r1"]


def test_run_errors(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        store.update_run(run_info("nope"))
    with pytest.raises(RunNotFoundError):
        store.finish_run("nope", "completed")
    store.create_run(run_info("r1"))
    with pytest.raises(ValueError, match="completed"):
        store.finish_run("r1", "running")  # type: ignore[arg-type]


def test_iter_orders_by_start_time_across_pages(store: Store) -> None:
    store.create_run(run_info("r1"))
    store.create_run(run_info("other"))
    times = [float(i // 3) for i in range(700)]  # ties, and more than two pages
    random.Random(7).shuffle(times)
    sent = [exchange("r1", i, started_at=t) for i, t in enumerate(times)]
    store.write_exchanges(sent)
    store.write_exchanges([exchange("other", 0)])
    got = list(store.iter_exchanges("r1"))
    assert len(got) == 700 == store.count_exchanges("r1")
    assert [e.started_at for e in got] == sorted(times)
    assert {e.request_id for e in got} == {e.request_id for e in sent}
    assert store.count_exchanges("other") == 1
    assert list(store.iter_exchanges("missing")) == []


def test_write_is_one_transaction(store: Store) -> None:
    store.create_run(run_info("r1"))
    batch = [exchange("r1", 1), exchange("r1", 2), exchange("r1", 1)]  # duplicate request id
    with pytest.raises(IntegrityError):
        store.write_exchanges(batch)
    assert store.count_exchanges("r1") == 0


def test_exchange_of_unknown_run_is_refused(store: Store) -> None:
    with pytest.raises(IntegrityError):
        store.write_exchanges([exchange("no-such-run", 1)])


def test_newer_record_schema_is_refused(store: Store) -> None:
    store.create_run(run_info("r1"))
    newer = exchange("r1", 2).model_copy(update={"schema_version": SCHEMA_VERSION + 1})
    store.write_exchanges([exchange("r1", 1), newer])
    with pytest.raises(StoreSchemaError, match="schema version"):
        next(store.iter_exchanges("r1"))


def test_newer_store_schema_is_refused(backend_url: str) -> None:
    store = Store.open(backend_url)
    with store.engine.begin() as conn:
        conn.execute(update(meta_table).values(value="99"))
    store.close()
    with pytest.raises(StoreSchemaError, match="99"):
        Store.open(backend_url)


def test_reopen_keeps_records(backend_url: str) -> None:
    first = Store.open(backend_url)
    first.create_run(run_info("r1"))
    first.write_exchanges([exchange("r1", 1)])
    first.close()
    again = Store.open(backend_url)
    assert again.count_exchanges("r1") == 1
    again.close()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "mysql://u@h/db", "not a url"])
def test_bad_database_url(url: str) -> None:
    with pytest.raises(ValueError):
        Store.open(url)


def test_sqlite_pragmas(tmp_path: object) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/sub/dir/r.db")  # parent dirs are created
    with store.engine.connect() as conn:
        pragma = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        }
    store.close()
    assert pragma == {"journal_mode": "wal", "synchronous": 1, "busy_timeout": 10_000,
                      "foreign_keys": 1}  # fmt: skip


def test_sqlite_fsync_is_an_opt_in(tmp_path: object) -> None:
    """``fsync=True`` (the router's ``store_fsync``): every commit synced (FULL = 2)."""
    with Store.open(f"sqlite:///{tmp_path}/r.db", fsync=True) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2


def test_concurrent_opens_of_a_new_store(backend_url: str) -> None:
    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: Store.open(backend_url), range(4)))
    stores[0].create_run(run_info("r1"))
    assert all(s.get_run("r1") is not None for s in stores)
    for s in stores:
        s.close()
