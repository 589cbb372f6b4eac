"""Typed provenance (``abserve.model.provenance``) against stores written before it was typed.

``dict_era_provenance.json`` is the provenance JSON the dict-era code wrote for an ``abserve run``
with two blocks (one with neighbour facts, one with too few samples: ``{}``), a sequential log,
an arm's death, a router restart and a key this version does not know; it was made by that
code's own writers (``block_record``, ``block_facts``, ``RoundLog``, ``ArmDeath``,
``restart_entry``). Read through a real store on each backend it must come back typed and be
written back byte for byte; sparse provenance must stay sparse.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import select, update
from tests.support.records_factory import ab_run

from abserve.compare import Policy, judge
from abserve.model.provenance import RouterRestart, RunProvenance
from abserve.model.records import RunInfo
from abserve.store import Store
from abserve.store.schema import runs_table

DICT_ERA = (Path(__file__).parent / "dict_era_provenance.json").read_text().strip()
RUN = "dict-era"


def stored_text(store: Store) -> str:
    with store.engine.connect() as conn:
        return str(conn.execute(select(runs_table.c.provenance).where(runs_table.c.run_id == RUN)).scalar())


def dict_era_run(store: Store, provenance: str = DICT_ERA) -> RunInfo:
    """A run whose provenance column holds ``provenance`` as the older code wrote it."""
    store.create_run(RunInfo(run_id=RUN, started_at=time.time()))
    with store.engine.begin() as conn:
        conn.execute(update(runs_table).where(runs_table.c.run_id == RUN).values(provenance=provenance))
    run = store.get_run(RUN)
    assert run is not None
    return run


def test_a_dict_era_provenance_loads_typed(store: Store) -> None:
    prov = dict_era_run(store).provenance
    assert (prov.abserve_version, prov.git_commit, prov.policy_sha256) == ("0.1.0", None, None)
    assert prov.host is not None
    assert (prov.host.cpus, prov.host.memory_gib) == (2, 7.7)
    first, second = prov.blocks
    assert (first.index, first.placement, first.requests) == (0, {"a": [0], "b": [1]}, 8)
    assert first.neighbours is not None
    core = first.neighbours.cores["0"]
    assert (core.foreign, core.foreign_threads, core.top) == (0.4, 1, [("python3", 0.25)])
    assert first.neighbours.arms["a"].threads == 1
    assert second.neighbours is not None
    assert second.neighbours.cores == {}
    assert prov.sequential is not None
    assert (prov.sequential.rounds, prov.sequential.looks[0].seconds) == (2, 12.5)
    assert prov.sequential.budget["seconds"] == 600.0
    assert prov.arm_death is not None
    assert prov.arm_death.reason == ("arm 'b' died during the run: exited with code 1; "
                                     "its log has no error line")
    assert prov.router_restarts == [RouterRestart(at=1733300002.0, previous_status="completed",
                                                  exchanges_before=3)]
    assert prov.model_extra == {"future_key": {"anything": [1, "x"]}}


def test_a_dict_era_provenance_is_written_back_byte_for_byte(store: Store) -> None:
    store.update_run(dict_era_run(store))
    assert stored_text(store) == DICT_ERA


def test_sparse_provenance_stays_sparse(store: Store) -> None:
    store.create_run(RunInfo(run_id=RUN, started_at=time.time()))
    assert stored_text(store) == "{}"
    run = store.get_run(RUN)
    assert run is not None
    run.provenance.arm_environment = {"a": {"VLLM_BATCH_INVARIANT": "1"}}
    run.provenance.load = {"exit_code": 0, "profiles": []}
    store.update_run(run)
    assert json.loads(stored_text(store)) == {"arm_environment": {"a": {"VLLM_BATCH_INVARIANT": "1"}},
                                              "load": {"exit_code": 0, "profiles": []}}


def test_a_compose_provenance_keeps_its_keys_and_values(store: Store) -> None:
    # A compose run's keys come in the order its steps ran; the typed record writes them in
    # its field order. Same keys, same values: JSON objects are unordered, and the report
    # renders provenance with sorted keys.
    written = {"router_restarts": [{"at": 5.0, "previous_status": "interrupted", "exchanges_before": 2}],
               "arm_environment": {"a": {}}, "model": {"id": "m", "revision": "abc"},
               "load": {"exit_code": 4, "profiles": [{"profile": "p", "stop_reason": "worker_lost"}]}}
    store.update_run(dict_era_run(store, json.dumps(written)))
    assert json.loads(stored_text(store)) == written


def test_a_default_changed_in_place_is_written() -> None:
    prov = RunProvenance()
    prov.router_restarts.append(RouterRestart(at=1.0, previous_status="completed", exchanges_before=0))
    prov.combined_from.append("block-0")
    assert prov.model_dump(mode="json") == {
        "router_restarts": [{"at": 1.0, "previous_status": "completed", "exchanges_before": 0}],
        "combined_from": ["block-0"]}


def test_the_judgment_carries_the_run_provenance_as_before(store: Store) -> None:
    run = dict_era_run(store).model_copy(update={"status": "completed"})
    carried = judge(run, ab_run(20), Policy()).provenance.model_dump(mode="json")
    judges_own = {"policy_sha256", "config_sha256"}  # overwritten by the judgment, as before
    before = {k: v for k, v in json.loads(DICT_ERA).items() if k not in judges_own}
    assert {k: carried[k] for k in before} == before
