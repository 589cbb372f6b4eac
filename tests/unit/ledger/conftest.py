"""Fixtures of the ledger tests: a store on each backend (the store tests' own fixtures) and a
store holding sign-offs with known verdicts, judged as ``abserve report`` judges them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, provenance, run_info
from tests.unit.store.conftest import BACKENDS, _url_for

from abserve.model.provenance import HostFacts
from abserve.model.records import RunInfo
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "configs/policy/default.yaml"
# the runs of ``signoffs``: id -> (b's tpot shift in seconds, seed, verdict)
SIGNOFFS = {"good": (0.0, 1, "pass"), "slow": (0.003, 2, "fail")}


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``database_url`` for each backend in turn (SQLite; PostgreSQL marked ``postgres``)."""
    yield from _url_for(request, tmp_path, request.param)


def signoff_run(run_id: str) -> RunInfo:
    """A completed run of config ``nightly`` whose arms were configured (a linear, b bisect in a venv)."""
    run = run_info({"a": provenance("linear"), "b": provenance("bisect")}, run_id=run_id, status="running")
    run.arms["b"].server_env = {"VLLM_FLAG": "1"}
    run.provenance.experiment = "nightly"
    run.provenance.config_sha256 = "c" * 64
    run.provenance.host = HostFacts(machine="x86_64", cpus=16, memory_gib=62.5, processor="Xeon")
    run.provenance.arm_configs = {
        "a": {"lookup": "linear", "role": "baseline"},
        "b": {"lookup": "bisect", "role": "candidate", "venv": "/opt/venvs/next",
              "install": ["vllm @ git+https://github.com/vllm-project/vllm@" + "ab12" * 10],
              "args": {"--max-num-seqs": 8}},
    }
    return run


def fill(url: str) -> None:
    """The ``SIGNOFFS`` runs, their exchanges stored."""
    with Store.open(url) as store:
        for run_id, (shift, seed, _) in SIGNOFFS.items():
            store.create_run(signoff_run(run_id))
            store.write_exchanges([ex.model_copy(update={"run_id": run_id})
                                   for ex in ab_run(70, itl_shift=shift, seed=seed, arms=("a", "b"))])
            store.finish_run(run_id, "completed")


@pytest.fixture
def signoffs(backend_url: str) -> str:
    """A store (each backend) holding the ``SIGNOFFS`` runs, not yet reported."""
    fill(backend_url)
    return backend_url
