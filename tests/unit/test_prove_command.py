"""``abserve prove`` writes each arm's lookup proof from telemetry files into the store,
so a run whose arms abserve did not start (docker compose) is judged on real proof."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from abserve.cli import app
from abserve.model.records import RunInfo
from abserve.model.telemetry import Counters, ProcessTelemetry
from abserve.store import Store


def write_telemetry(directory: Path, mode: str | None, gather_calls: int) -> None:
    directory.mkdir(parents=True)
    record = ProcessTelemetry(
        pid=4242, process_name="EngineCore_DP0", role="engine_core", mode=mode, scope="runner",
        vllm_version="0.33.0", patched=["vllm.v1.worker.gpu.mm.encoder_runner"],
        counters=Counters(lookup_calls=gather_calls, gather_calls=gather_calls, items_examined=9),
    )
    (directory / "4242.json").write_text(json.dumps(record.to_json()))


def test_prove_records_proven_and_unproven_arms(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'abserve.db'}"
    store = Store.open(db)
    store.create_run(RunInfo(run_id="r1", started_at=time.time()))
    store.finish_run("r1", "completed")
    store.close()
    write_telemetry(tmp_path / "tel" / "a", "linear", 12)
    write_telemetry(tmp_path / "tel" / "b", "linear", 12)  # b ran the wrong lookup
    args = ["prove", "r1", "--db", db, "--telemetry-root", str(tmp_path / "tel"),
            "--expect", "a=linear", "--expect", "b=bisect"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    store = Store.open(db)
    run = store.get_run("r1")
    store.close()
    assert run is not None
    assert run.arms["a"].proven_lookup == "linear"
    assert run.arms["a"].telemetry.lookup_calls == 12
    assert run.arms["b"].expected_lookup == "bisect"
    assert run.arms["b"].proven_lookup == "linear"
    assert run.status == "completed"
