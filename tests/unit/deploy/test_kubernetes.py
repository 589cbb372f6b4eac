"""The Kubernetes manifests (deploy/kubernetes, docs/kubernetes.md), rendered and checked offline.

Every kustomization (the base, each overlay, the report reader) is rendered with kustomize
(``kubectl kustomize``) and every object it renders is validated against the Kubernetes API's
JSON schemas of ``KUBERNETES_VERSION``, strictly. Then what an operator relies on: the arms run
the vLLM command docker-compose.yml runs for the Job's experiment (as abserve.deploy.compose_env
derives it), on a GPU each, ready on ``/health``; every address the experiment names is a
rendered Service; the orchestrator Job runs ``abserve run`` with options abserve's own parser
takes and writes where the arms' proofs are; nothing is reachable from outside the namespace, no
pod runs as root, and no secret is in a ConfigMap. The real ``abserve check`` on the Job's
config is the last test (it imports vLLM's parser: marked ``vllm``). Nothing here runs on a
cluster.
"""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from tests.support.kustomize import (
    KUBE,
    Obj,
    command_line,
    config_map_data,
    containers,
    environment,
    find,
    kustomizations,
    pod_spec,
    render,
    validate,
)

from abserve.arms.compose_target import arm_url
from abserve.deploy.compose_env import ComposeExperiment, arm_env, compose_env, load_experiment

pytestmark = pytest.mark.process  # kubectl kustomize, a short child process per folder
FOLDERS = kustomizations()
WITH_JOB = [f for f in FOLDERS if (f / "kustomization.yaml").read_text().count("abserve-orchestrator") == 0
            and f.name != "report-reader"]
SECRET_WORDS = ("password", "postgresql://", "postgresql+psycopg://", "api_key", "token")


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {str(folder.relative_to(KUBE)): render(folder) for folder in FOLDERS}


def experiment_of(objs: list[Obj], tmp_path: Path) -> tuple[ComposeExperiment, Path]:
    """The Job's experiment, written out from its ConfigMap under the name it is mounted as."""
    job = find(objs, "Job", "abserve-orchestrator")
    mount = next(m for m in pod_spec(job)["containers"][0]["volumeMounts"] if m["name"] == "experiment")
    volume = next(v for v in pod_spec(job)["volumes"] if v["name"] == "experiment")
    config = Path(command_line(objs, pod_spec(job)["containers"][0])[2])
    assert config.parent == Path(mount["mountPath"]), "the Job's config is not in its ConfigMap"
    data = config_map_data(objs, volume["configMap"]["name"])
    path = tmp_path / config.name
    path.write_text(data[config.name])
    return load_experiment(path), path


def arm_command(experiment: ComposeExperiment, arm: str, gpu_memory: str) -> list[str]:
    """docker-compose.yml's vllm-<arm> command for this experiment (compose_env's values)."""
    env = compose_env(experiment, "x") | arm_env(arm, experiment.arms[arm])
    return [env["ABSERVE_MODEL"], "--revision", env["ABSERVE_MODEL_REVISION"],
            "--tokenizer-revision", env["ABSERVE_MODEL_REVISION"],
            "--served-model-name", env["ABSERVE_SERVED_MODEL_NAME"], "--host", "0.0.0.0",
            "--port", "8000", "--gpu-memory-utilization", gpu_memory,
            "--allowed-media-domains", "abserve.invalid",
            *shlex.split(env["VLLM_SERVER_ARGS"]), *shlex.split(env[f"VLLM_ARM_ARGS_{arm.upper()}"])]


def arm_problems(objs: list[Obj], experiment: ComposeExperiment) -> list[str]:
    """How the rendered arms differ from what the experiment asks (empty: they agree)."""
    problems = []
    job = find(objs, "Job", "abserve-orchestrator")
    out = Path(command_line(objs, pod_spec(job)["containers"][0])[-1])
    for arm, spec in experiment.arms.items():
        vllm = pod_spec(find(objs, "Deployment", f"vllm-{arm}"))["containers"][0]
        env = environment(objs, vllm)
        args = command_line(objs, vllm)
        gpu_memory = args[args.index("--gpu-memory-utilization") + 1]
        if args != (want := arm_command(experiment, arm, gpu_memory)):
            problems.append(f"vllm-{arm} args {args} != {want}")
        expected_env = {**experiment.server.env, "ABSERVE_MM_LOOKUP": spec.lookup or "",
                        "ABSERVE_TELEMETRY_DIR": str(out / "telemetry" / arm)}
        problems += [f"vllm-{arm} env {k}={env.get(k)!r}, want {v!r}"
                     for k, v in expected_env.items() if env.get(k) != v]
        if vllm["resources"]["limits"].get("nvidia.com/gpu") != 1:
            problems.append(f"vllm-{arm} does not ask for one GPU")
    return problems


def service_ports(objs: list[Obj]) -> dict[str, set[int]]:
    return {s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]}
            for s in objs if s["kind"] == "Service"}


def urls_of(value: Any) -> list[str]:
    """Every http(s) URL anywhere in a config's values."""
    if isinstance(value, dict):
        return [u for v in value.values() for u in urls_of(v)]
    if isinstance(value, list):
        return [u for v in value for u in urls_of(v)]
    return [value] if isinstance(value, str) and value.startswith(("http://", "https://")) else []


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(KUBE)))
def test_every_rendered_object_is_valid_in_the_stated_kubernetes_version(
        folder: Path, rendered: dict[str, list[Obj]]) -> None:
    objs = rendered[str(folder.relative_to(KUBE))]
    assert objs
    assert [p for p in map(validate, objs) if p] == []
    assert {o["metadata"].get("namespace", "abserve") for o in objs} == {"abserve"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "abserve" for o in objs)


def test_the_validator_refuses_what_a_cluster_would(rendered: dict[str, list[Obj]]) -> None:
    job = copy.deepcopy(find(rendered["base"], "Job", "abserve-orchestrator"))
    job["spec"]["template"]["spec"]["containers"][0]["comand"] = ["abserve"]  # misspelt
    assert validate(job) is not None
    assert "comand" in str(validate(job))
    job = copy.deepcopy(find(rendered["base"], "Job", "abserve-orchestrator"))
    job["spec"]["backoffLimit"] = "none"
    assert validate(job) is not None


@pytest.mark.parametrize("folder", WITH_JOB, ids=lambda f: str(f.relative_to(KUBE)))
def test_the_arms_run_what_the_jobs_experiment_asks_on_a_gpu_each(
        folder: Path, rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    objs = rendered[str(folder.relative_to(KUBE))]
    experiment, _ = experiment_of(objs, tmp_path)
    assert sorted(experiment.arms) == sorted(
        o["metadata"]["name"].removeprefix("vllm-") for o in objs
        if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("vllm-"))
    assert arm_problems(objs, experiment) == []
    assert config_map_data(objs, "abserve-model") == {
        "ABSERVE_MODEL": experiment.model.id, "ABSERVE_MODEL_REVISION": experiment.model.revision,
        "ABSERVE_SERVED_MODEL_NAME": experiment.model.served_name}
    for arm in experiment.arms:
        deployment = find(objs, "Deployment", f"vllm-{arm}")
        vllm = pod_spec(deployment)["containers"][0]
        assert vllm["image"].startswith(f"abserve/vllm-{arm}:")  # docker-compose.yml's image
        assert pod_spec(deployment)["nodeSelector"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert vllm[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert {"name": "http", "containerPort": 8000} in vllm["ports"]
        service = find(objs, "Service", f"vllm-{arm}")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]


def test_a_changed_arm_is_caught(rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    objs = copy.deepcopy(rendered["base"])
    experiment, _ = experiment_of(objs, tmp_path)
    vllm = pod_spec(find(objs, "Deployment", "vllm-b"))["containers"][0]
    vllm["args"][vllm["args"].index("--seed=0")] = "--seed=1"
    vllm["env"] = [e for e in vllm["env"] if e["name"] != "VLLM_BATCH_INVARIANT"]
    assert [p.split(" ", 2)[:2] for p in arm_problems(objs, experiment)] == [
        ["vllm-b", "args"], ["vllm-b", "env"]]


def test_the_two_arms_differ_only_in_their_name_and_lookup(rendered: dict[str, list[Obj]]) -> None:
    def normal(arm: str, lookup: str) -> str:
        text = yaml.safe_dump(find(rendered["base"], "Deployment", f"vllm-{arm}"))
        return text.replace(f"vllm-{arm}", "vllm-ARM").replace(f"telemetry/{arm}", "telemetry/ARM") \
            .replace(f"abserve.dev/arm: {arm}", "abserve.dev/arm: ARM").replace(lookup, "LOOKUP")

    assert normal("a", "linear") == normal("b", "bisect")


@pytest.mark.parametrize("folder", WITH_JOB, ids=lambda f: str(f.relative_to(KUBE)))
def test_every_address_the_experiment_names_is_a_rendered_service(
        folder: Path, rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    objs = rendered[str(folder.relative_to(KUBE))]
    experiment, _ = experiment_of(objs, tmp_path)
    ports = service_ports(objs)
    named = [*urls_of(experiment.model_dump(mode="json")), *map(arm_url, experiment.arms)]
    assert named
    assert {urlsplit(u).hostname for u in named} >= {f"vllm-{a}" for a in experiment.arms}
    for url in named:
        parts = urlsplit(url)
        assert parts.port in ports.get(parts.hostname or "", set()), f"{url}: no such Service"
    job = find(objs, "Job", "abserve-orchestrator")
    waited = command_line(objs, pod_spec(job)["initContainers"][0])[3:]
    assert sorted(waited) == sorted(map(arm_url, experiment.arms))
    assert {c["image"].split(":")[0] for c in containers(job)} == {"abserve/service"}


@pytest.mark.parametrize("folder", WITH_JOB, ids=lambda f: str(f.relative_to(KUBE)))
def test_the_job_runs_abserve_run_with_options_its_parser_takes(
        folder: Path, rendered: dict[str, list[Obj]]) -> None:
    import typer.main

    from abserve.cli import app

    objs = rendered[str(folder.relative_to(KUBE))]
    job = find(objs, "Job", "abserve-orchestrator")
    line = command_line(objs, pod_spec(job)["containers"][0])
    assert line[:2] == ["abserve", "run"]
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    params = run.make_context("run", line[2:]).params
    run_id = config_map_data(objs, "abserve-run")["ABSERVE_RUN_ID"]
    assert (params["target"], params["run_id"], params["out"]) == ("compose", run_id, Path(f"/runs/{run_id}"))
    assert job["spec"]["backoffLimit"] == 0
    assert pod_spec(job)["restartPolicy"] == "Never"
    env = environment(objs, pod_spec(job)["containers"][0])
    assert env["ABSERVE_DATABASE_URL"] == "<secret abserve-store/url>"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(KUBE)))
def test_secure_by_default(folder: Path, rendered: dict[str, list[Obj]]) -> None:
    objs = rendered[str(folder.relative_to(KUBE))]
    assert {s["spec"].get("type", "ClusterIP") for s in objs if s["kind"] == "Service"} <= {"ClusterIP"}
    for obj in objs:
        if obj["kind"] == "ConfigMap":
            text = yaml.safe_dump(obj["data"]).lower()
            assert not [w for w in SECRET_WORDS if w in text], f"{obj['metadata']['name']} holds a secret"
        if obj["kind"] not in ("Deployment", "StatefulSet", "Job", "Pod"):
            continue
        spec = pod_spec(obj)
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in containers(obj):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            for item in container.get("env", []):  # a secret's value only ever from a Secret
                assert not any(w in str(item.get("value", "")).lower() for w in SECRET_WORDS)
    if folder.name != "report-reader":
        policy = find(objs, "NetworkPolicy", "abserve-namespace-only")["spec"]
        assert policy["podSelector"] == {}
        assert policy["policyTypes"] == ["Ingress", "Egress"]
        assert policy["ingress"] == [{"from": [{"podSelector": {}}]}]


def test_the_by_hand_router_serves_the_experiments_arms(
        rendered: dict[str, list[Obj]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from abserve.router.settings import load_settings

    objs = rendered["overlays/by-hand-router"]
    experiment, _ = experiment_of(rendered["base"], tmp_path)
    router = pod_spec(find(objs, "Deployment", "abserve-router"))["containers"][0]
    line = command_line(objs, router)
    settings_file = tmp_path / Path(line[line.index("--config") + 1]).name
    settings_file.write_text(config_map_data(objs, "abserve-router-settings")[settings_file.name])
    monkeypatch.setenv("ABSERVE_API_KEY", "k" * 32)  # the Secret abserve-api-key at run time
    settings = load_settings(settings_file)
    assert {name: arm.url for name, arm in settings.arms.items()} == {a: arm_url(a) for a in experiment.arms}
    wanted = experiment.router
    for key in ("primary", "client_waits_for", "max_images", "top_logprobs", "seed_policy",
                "seeded_sampling"):
        assert getattr(settings, key) == wanted[key], key
    env = environment(objs, router)
    assert env["ABSERVE_ROUTER_DATABASE_URL"] == "<secret abserve-store/url>"
    assert env["ABSERVE_API_KEY"] == "<secret abserve-api-key/key>"
    assert not [o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == "abserve-orchestrator"]


def test_the_router_replicas_join_the_owners_run_behind_one_service(
        rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    import typer.main

    from abserve.cli import app

    objs = rendered["overlays/by-hand-router"]
    command = typer.main.get_command(app).commands["router"]  # type: ignore[attr-defined]
    owner, replica = (find(objs, "Deployment", name) for name in ("abserve-router", "abserve-router-replica"))
    lines = [command_line(objs, pod_spec(d)["containers"][0]) for d in (owner, replica)]
    assert lines[0][lines[0].index("--config") + 1] == lines[1][lines[1].index("--config") + 1]
    local = tmp_path / "router-settings.yaml"  # --config must exist: the pod's file, here
    local.write_text(config_map_data(objs, "abserve-router-settings")[local.name])
    params = [command.make_context("router", [str(local) if w.startswith("/etc/") else w
                                              for w in line[2:]]).params for line in lines]
    assert [p["join"] for p in params] == [False, True]
    assert [(p["host"], p["port"]) for p in params] == [("0.0.0.0", 8100)] * 2
    envs = [environment(objs, pod_spec(d)["containers"][0]) for d in (owner, replica)]
    assert envs[0]["ABSERVE_ROUTER_RUN_ID"] == envs[1]["ABSERVE_ROUTER_RUN_ID"]
    assert envs[0]["ABSERVE_ROUTER_DATABASE_URL"] == envs[1]["ABSERVE_ROUTER_DATABASE_URL"]
    assert envs[0]["ABSERVE_ROUTER_RESUME"] == "true"
    assert "ABSERVE_ROUTER_RESUME" not in envs[1]  # a joined replica refuses resume
    assert owner["spec"]["replicas"] == 1
    assert replica["spec"]["replicas"] >= 1
    selector = find(objs, "Service", "abserve-router")["spec"]["selector"]
    for deployment in (owner, replica):
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_an_existing_database_replaces_the_statefulset(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["overlays/existing-postgres"]
    assert not [o for o in objs if o["metadata"]["name"] == "abserve-db"]
    assert find(rendered["base"], "StatefulSet", "abserve-db")["spec"]["volumeClaimTemplates"]
    assert find(objs, "NetworkPolicy", "abserve-store-egress")


@pytest.mark.vllm  # abserve check runs vLLM's own argument parser over the server flags (~20 s)
def test_abserve_check_accepts_the_jobs_experiment(rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    configs: dict[str, Path] = {}
    for folder in WITH_JOB:
        job_dir = tmp_path / folder.name
        job_dir.mkdir()
        _, path = experiment_of(rendered[str(folder.relative_to(KUBE))], job_dir)
        configs.setdefault(path.read_text(), path)
    checks = {path: subprocess.Popen(  # each distinct experiment once, side by side (a core each)
        [sys.executable, "-m", "abserve", "check", str(path), "--out", str(path.parent / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for path in configs.values()}
    try:
        outputs = {path: check.communicate(timeout=300)[0] for path, check in checks.items()}
    finally:
        for check in checks.values():
            check.kill()  # none left behind by a timeout (a no-op for one that exited)
    for path, output in outputs.items():
        assert checks[path].returncode == 0, f"{path}: {output}"
        assert "arm a: managed, baseline" in output
        assert "arm b: managed, candidate" in output

def test_the_documented_overlay_renders_valid_with_the_operators_images(tmp_path: Path) -> None:
    """docs/kubernetes.md's "2. Your overlay", as written: its kustomization (from the page's
    heredoc) renders against the base, every object is valid and every image is the registry's."""
    from tests.support.doc_blocks import blocks, in_section

    page = KUBE.parents[1] / "docs" / "kubernetes.md"
    block = next(b for b in in_section(blocks(page), "2. Your overlay") if b.is_shell)
    kustomization = block.text.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    mine = tmp_path / "mine"  # ../../base as seen from the page's folder, made relative to here
    mine.mkdir()
    base = os.path.relpath(KUBE / "base", mine)
    (mine / "kustomization.yaml").write_text(kustomization.replace("../../base", base) + "\n")
    (mine / "run.env").write_text("ABSERVE_RUN_ID=signoff-20260101-000000\n")  # as step 4 writes it
    objs = render(mine)
    assert config_map_data(objs, "abserve-run") == {"ABSERVE_RUN_ID": "signoff-20260101-000000"}
    assert [p for p in map(validate, objs) if p] == []
    images = {c["image"] for o in objs if o["kind"] in ("Deployment", "Job", "StatefulSet")
              for c in containers(o)}
    assert {i for i in images if not i.startswith("postgres:")} == {
        "registry.example.com/abserve/service:1", "registry.example.com/abserve/vllm-a:v0.33.0",
        "registry.example.com/abserve/vllm-b:v0.33.0"}
    for arm in ("a", "b"):
        assert pod_spec(find(objs, "Deployment", f"vllm-{arm}"))["nodeSelector"] == {
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {o["spec"]["storageClassName"] for o in objs if o["kind"] == "PersistentVolumeClaim"} == {
        "my-rwx-class"}

