"""A restarted router reopens its stopped run (``Store.resume_run``, ``router.run_open``).

Real SQLite and PostgreSQL (the ``store`` fixture runs each test on both). Checked: a
completed or dead run is reopened ``running``, owned by this process, its exchanges and
config untouched and the restart appended to ``provenance["router_restarts"]``; a run
whose owner is alive is refused (two routers must never write one run), and so is one
recorded with other arms, URLs, primary or request settings; without ``resume`` an
existing run is ``RunExistsError`` as before.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from tests.support.records_factory import full_exchange as exchange

from abserve.model.records import ROUTER_RESTARTS_KEY, RunInfo
from abserve.router.run_open import open_run
from abserve.router.settings import RouterSettings
from abserve.store import RunConfigError, RunExistsError, RunInUseError, RunNotFoundError, Store
from abserve.store.owner import Owner
from abserve.store.schema import runs_table

RUN = "resumed"


def config(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """The config the router stores for its run (``RouterSettings.public_config``)."""
    settings: dict[str, Any] = {
        "arms": {"a": {"url": "http://127.0.0.1:8001", "role": "baseline"},
                 "b": {"url": "http://127.0.0.1:8002", "role": "candidate"}},
        "primary": "a", "dev_mode": True, "run_id": RUN, "run_dir": str(tmp_path), "resume": True,
    }
    settings.update(changes)
    return RouterSettings(**settings).public_config()


def stopped_run(store: Store, tmp_path: Path, exchanges: int = 3) -> dict[str, Any]:
    """A run the router created, wrote ``exchanges`` into and finished ``completed``."""
    recorded = config(tmp_path)
    store.create_run(RunInfo(run_id=RUN, started_at=time.time(), config=recorded,
                             provenance={"model": {"name": "tiny"}}))
    store.write_exchanges([exchange(RUN, i) for i in range(exchanges)])
    store.finish_run(RUN, "completed")
    return recorded


def row(store: Store) -> dict[str, Any]:
    with store.engine.connect() as conn:
        return dict(conn.execute(select(runs_table).where(runs_table.c.run_id == RUN)).one()._mapping)


def set_row(store: Store, **values: object) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(runs_table).where(runs_table.c.run_id == RUN).values(**values))


def get(store: Store) -> RunInfo:
    run = store.get_run(RUN)
    assert run is not None
    return run


def restarts_of(store: Store) -> list[dict[str, Any]]:
    found = get(store).provenance.model_dump(mode="json").get(ROUTER_RESTARTS_KEY)
    assert isinstance(found, list)
    return found


def test_a_completed_run_is_reopened_with_its_exchanges_and_the_restart_recorded(
        store: Store, tmp_path: Path) -> None:
    recorded = stopped_run(store, tmp_path)
    before = get(store)
    t = time.time()
    assert store.resume_run(RUN, config(tmp_path)) == 1
    run = get(store)
    assert (run.status, run.ended_at, run.started_at) == ("running", None, before.started_at)
    assert run.config == recorded
    assert run.provenance.model == {"name": "tiny"}
    (entry,) = restarts_of(store)
    assert entry["previous_status"] == "completed"
    assert entry["exchanges_before"] == 3
    assert t <= entry["at"] <= time.time()
    stored = row(store)
    assert (stored["owner_pid"], stored["owner_host"]) == (os.getpid(), Owner.current().host)
    assert time.time() - stored["heartbeat_at"] < 5
    assert [e.request_id for e in store.iter_exchanges(RUN)] == [f"req-{i:06d}" for i in range(3)]

    store.write_exchanges([exchange(RUN, 3)])  # the second half writes on
    store.finish_run(RUN, "completed")
    assert store.resume_run(RUN, config(tmp_path)) == 2
    assert [r["exchanges_before"] for r in restarts_of(store)] == [3, 4]


def test_a_run_whose_router_died_is_reopened_as_interrupted(store: Store, tmp_path: Path) -> None:
    stopped_run(store, tmp_path)
    me = Owner.current()
    # left "running" by a router that was killed: its PID now belongs to another process
    set_row(store, status="running", ended_at=None, owner_pid=me.pid,
            owner_started=(me.started or 0) - 100, heartbeat_at=time.time())
    assert get(store).status == "interrupted"
    store.resume_run(RUN, config(tmp_path))
    assert restarts_of(store)[0]["previous_status"] == "interrupted"


def test_a_run_with_a_live_owner_is_refused(store: Store, tmp_path: Path) -> None:
    store.create_run(RunInfo(run_id=RUN, started_at=time.time(), config=config(tmp_path)))
    before = row(store)
    with pytest.raises(RunInUseError, match="two routers must never write one run") as refused:
        store.resume_run(RUN, config(tmp_path))
    assert refused.value.owner_known_alive  # this very process
    assert row(store) == before

    set_row(store, owner_host="elsewhere", heartbeat_at=time.time())  # alive by its heartbeat
    with pytest.raises(RunInUseError) as remote:
        store.resume_run(RUN, config(tmp_path))
    assert not remote.value.owner_known_alive


A = {"url": "http://127.0.0.1:8001", "role": "baseline"}


@pytest.mark.parametrize(("changes", "named"), [
    ({"arms": {"a": A, "b": {"url": "http://127.0.0.1:9999", "role": "candidate"}}}, "arms.b.url"),
    ({"arms": {"a": A, "c": {"url": "http://127.0.0.1:8002", "role": "candidate"}}},
     "arms: ['a', 'b'] -> ['a', 'c']"),
    ({"arms": {"a": A, "b": {"url": "http://127.0.0.1:8002", "role": "noise_floor"}}}, "arms.b.role"),
    ({"primary": "b"}, "primary: 'a' -> 'b'"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"default_seed": 7}, "default_seed"),
])
def test_a_run_recorded_with_another_config_is_refused(
        store: Store, tmp_path: Path, changes: dict[str, Any], named: str) -> None:
    stopped_run(store, tmp_path)
    before = row(store)
    with pytest.raises(RunConfigError, match="another router config") as refused:
        store.resume_run(RUN, config(tmp_path, **changes))
    assert named in str(refused.value)
    assert row(store) == before


def test_limits_and_addresses_may_change_between_the_halves(store: Store, tmp_path: Path) -> None:
    recorded = stopped_run(store, tmp_path)
    store.resume_run(RUN, config(tmp_path, port=9100, max_concurrency=8, drain_timeout_s=5,
                                 run_dir=str(tmp_path / "elsewhere")))
    assert get(store).config == recorded  # the run keeps the config it was started with


def test_open_run_without_resume_keeps_refusing_an_existing_run(store: Store, tmp_path: Path) -> None:
    open_run(store, RUN, config(tmp_path), resume=False)  # a new run is created either way
    store.finish_run(RUN, "completed")
    with pytest.raises(RunExistsError):
        open_run(store, RUN, config(tmp_path), resume=False)
    assert ROUTER_RESTARTS_KEY not in get(store).provenance.model_dump()
    open_run(store, RUN, config(tmp_path), resume=True)
    assert len(restarts_of(store)) == 1
    with pytest.raises(RunNotFoundError):
        store.resume_run("missing", config(tmp_path))


def test_open_run_waits_for_a_silent_owner_on_another_host(backend_url: str, tmp_path: Path) -> None:
    with Store.open(backend_url, stale_after_s=0.5) as store:
        store.create_run(RunInfo(run_id=RUN, started_at=time.time(), config=config(tmp_path)))
        set_row(store, owner_host="elsewhere", heartbeat_at=time.time())  # then it died
        t = time.monotonic()
        open_run(store, RUN, config(tmp_path), resume=True)
        assert time.monotonic() - t >= 0.4  # waited for its heartbeat to go stale
        assert restarts_of(store)[0]["previous_status"] == "interrupted"


def test_update_run_keeps_the_restarts(store: Store, tmp_path: Path) -> None:
    stopped_run(store, tmp_path)
    read_before_restart = get(store)
    store.resume_run(RUN, config(tmp_path))
    read_before_restart.provenance.arm_environment = {"a": {}}
    store.update_run(read_before_restart)
    assert get(store).provenance.arm_environment == {"a": {}}
    assert len(restarts_of(store)) == 1
