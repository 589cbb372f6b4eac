"""A store holding an accepted release of the CPU default, made the way a release manager makes
one: a sign-off of config ``cpu-default`` whose arms were configured as the shipped config's,
``abserve report``, then ``abserve accept``. An arm ``from: accepted`` (configs/nightly-cpu.yaml)
then starts the shipped candidate build (``b``: bisect on core 0) as its baseline. The sign-off's
records are synthetic (``tests.support.records_factory``): only its configured arms are started
again, never its numbers."""

from __future__ import annotations

from pathlib import Path

import yaml
from tests.support.records_factory import ab_run, provenance, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "configs/policy/default.yaml"


def accepted_store(url: str, report_dir: Path, run_id: str = "release-1", name: str = "v0") -> str:
    """The store at ``url`` with run ``run_id`` of config cpu-default reported (``report_dir``)
    and its candidate accepted as release ``name``; returns ``url``."""
    config = yaml.safe_load((ROOT / "configs/cpu-default.yaml").read_text())
    run = run_info({"a": provenance("linear"), "b": provenance("bisect")}, run_id=run_id, status="running")
    run.provenance = run.provenance.model_copy(  # arm_configs: what `abserve accept` starts again
        update={"experiment": config["name"], "arm_configs": config["arms"]})
    with Store.open(url) as store:
        store.create_run(run)
        store.write_exchanges([ex.model_copy(update={"run_id": run_id})
                               for ex in ab_run(70, seed=1, arms=("a", "b"))])
        store.finish_run(run_id, "completed")
    runner = CliRunner()
    done = runner.invoke(app, ["report", run_id, "--db", url, "--out", str(report_dir),
                               "--policy", str(POLICY)])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["accept", run_id, "--as", name, "--db", url])
    assert done.exit_code == 0, done.output
    return url
