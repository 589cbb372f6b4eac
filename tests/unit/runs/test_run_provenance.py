"""The provenance ``abserve run`` records (``launch.provenance.run_provenance`` and what the
orchestrator adds: block records with their neighbour facts, the sequential log, an arm's
death), stored in a real SQLite store: typed when read back, and the same keys in the same
order as the dict-era code wrote (``tests/unit/store/dict_era_provenance.json``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from abserve.arms.neighbours import Snapshot, ThreadStat, block_facts
from abserve.arms.watch import ArmDeath
from abserve.config import BudgetConfig, load_experiment
from abserve.model.records import RunInfo
from abserve.runs.blocks import block_record, experiment_blocks
from abserve.runs.provenance import run_provenance
from abserve.runs.rounds import RoundLog
from abserve.store import Store
from abserve.store.schema import runs_table

pytestmark = pytest.mark.process  # the provenance asks git for the commit (git rev-parse)

CONFIG = Path("configs/cpu-default.yaml")
DICT_ERA = Path(__file__).parents[1] / "store" / "dict_era_provenance.json"


def samples() -> list[Snapshot]:
    """Two samples 2 s apart: arm a's thread ran 1 s on core 0, a foreign thread 0.5 s."""
    before = {1: ThreadStat(1, "vllm", 0, 0, 0), 2: ThreadStat(2, "python3", 0, 0, 0)}
    after = {1: ThreadStat(1, "vllm", 0, 10**9, 10**8), 2: ThreadStat(2, "python3", 0, 5 * 10**8, 0)}
    return [Snapshot(at=0.0, threads=before, busy_ticks={0: 0}), Snapshot(at=2.0, threads=after,
                                                                           busy_ticks={0: 180})]


def test_a_run_records_typed_provenance_with_the_dict_era_keys(tmp_path: Path) -> None:
    config = load_experiment(CONFIG)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    facts = block_facts(samples(), {1: "a"}, {"a": [0], "b": [1]})
    blocks = [block_record(b, 10.0, 12.0, 8, {}, facts) for b in experiment_blocks(config)[:2]]
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    with Store.open(url) as store:
        store.create_run(RunInfo(run_id="r", started_at=time.time()))
        run = store.get_run("r")
        assert run is not None
        run.provenance = run_provenance(config, CONFIG, model, blocks)
        run.provenance.sequential = RoundLog(budget=BudgetConfig(seconds=60), rounds=1).as_provenance()
        run.provenance.arm_death = ArmDeath("b", "exited with code 1", None, 5.0).as_provenance()
        store.update_run(run)
        with store.engine.connect() as conn:
            text = conn.execute(select(runs_table.c.provenance)).scalar()
        back = store.get_run("r")
    assert back is not None
    written = json.loads(str(text))
    dict_era = [k for k in json.loads(DICT_ERA.read_text()) if k not in ("router_restarts", "future_key")]
    assert list(written) == [*dict_era, "arm_configs"]  # the ledger's key: each arm as configured
    assert written["arm_configs"] == {name: arm.recorded() for name, arm in config.arms.items()}
    assert written["arm_configs"]["b"] == {"role": "candidate", "lookup": "bisect", "cpus": [0]}
    assert written["blocks"][0]["neighbours"] == facts
    assert written["host"]["cpus"]
    assert written["seeds"] == {"load": config.load.seed, "server": config.server.seed}
    neighbours = back.provenance.blocks[0].neighbours
    assert neighbours is not None
    assert neighbours.cores["0"].foreign == written["blocks"][0]["neighbours"]["cores"]["0"]["foreign"] > 0
    assert back.provenance.experiment == config.name
    assert back.provenance.arm_death is not None
    assert back.provenance.arm_death.arm == "b"
