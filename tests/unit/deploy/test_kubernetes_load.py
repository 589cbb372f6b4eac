"""deploy/kubernetes/overlays/distributed-load: the orchestrator's load from Locust worker pods.

The overlay renders and validates with the others (tests/unit/deploy/test_kubernetes.py, which
also checks its arms and runs ``abserve check`` on its experiment); here, that the workers find
the orchestrator's Locust master and router as the experiment's ``load.workers`` says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.kustomize import KUBE, Obj, command_line, find, pod_spec, render
from tests.unit.deploy.test_kubernetes import experiment_of

pytestmark = pytest.mark.process  # kubectl kustomize


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {"overlays/distributed-load": render(KUBE / "overlays" / "distributed-load")}


def test_the_load_workers_reach_the_orchestrators_master_and_router(
        rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    import typer.main

    from abserve.cli import app

    objs = rendered["overlays/distributed-load"]
    experiment, _ = experiment_of(objs, tmp_path)
    workers = experiment.load.workers
    assert workers is not None
    deployment = find(objs, "Deployment", "abserve-load-worker")
    assert deployment["spec"]["replicas"] == workers.count
    line = command_line(objs, pod_spec(deployment)["containers"][0])
    assert line[:2] == ["abserve", "load-worker"]
    command = typer.main.get_command(app).commands["load-worker"]  # type: ignore[attr-defined]
    master = command.make_context("load-worker", line[2:]).params["master"]
    assert master == f"{workers.reachable_host}:{workers.port}"
    service = find(objs, "Service", workers.reachable_host)  # the Job pod's own address
    assert service["spec"]["clusterIP"] == "None"  # any port of the pod: the router's too
    job = find(objs, "Job", "abserve-orchestrator")
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
