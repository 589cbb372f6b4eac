"""Any number of candidate arms under compose (issue 28 item 2), checked without a Docker engine.

docker-compose.yml has services for a, b and a2; every other arm of a config gets ``vllm-<arm>``
from the compose files ``python -m abserve.deploy.compose_env --arms-compose`` makes from each
compose file of the stack (its ``vllm-b`` with the arm's names). Real Docker Compose resolves
the stack with them, for the GPU file and under the CPU override with three arms (a, b and
``hybrid``, the configuration of the compose check's three-arm step); prepare-run.sh and
scripts/signoff.sh run for real with recording fakes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.deploy.test_compose import ENV_EXAMPLE, compose_binary
from tests.unit.deploy.test_compose_scripts import calls, fake

from abserve.deploy.compose_env import (
    ComposeExperiment,
    compose_env,
    extra_arms_compose,
    load_experiment,
    main,
    render_env_file,
)

ROOT = Path(__file__).resolve().parents[3]
CPU_CONFIG = ROOT / "configs" / "cpu-compose.yaml"
CONFIG_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"
RELEASE = ROOT / "configs" / "gpu-release.yaml"  # every arm an image: a third one is too
SOURCES = {"gpu": ["docker-compose.yml"], "cpu": ["docker-compose.yml", "docker-compose.cpu.yml"]}


def three_arms(path: Path = CPU_CONFIG, arm: str = "hybrid", lookup: str = "hybrid",
               **spec: Any) -> dict[str, Any]:
    """A config with a third candidate ``arm`` beside a and b (and a2 where it has one)."""
    raw = dict(yaml.safe_load(path.read_text()))
    raw["arms"][arm] = {"lookup": lookup, "role": "candidate", **spec}
    if "arms" in raw["router"]:  # the CPU config lists them; the GPU configs derive them
        raw["router"]["arms"][arm] = {"url": f"http://vllm-{arm}:8000", "role": "candidate"}
    return raw


def resolve(raw: dict[str, Any], tmp_path: Path, stack: str) -> dict[str, Any]:
    """The compose model of ``raw`` on ``stack``: the compose files, then the generated ones."""
    experiment = ComposeExperiment.model_validate(raw)
    env_file = tmp_path / "derived.env"
    env_file.write_text(render_env_file(compose_env(experiment, "configs/cpu-compose.yaml")))
    files = list(SOURCES[stack])
    for i, source in enumerate(SOURCES[stack]):
        text = extra_arms_compose(experiment, (ROOT / source).read_text())
        if text:
            (tmp_path / f"arms.{i}.yml").write_text(text)
            files.append(str(tmp_path / f"arms.{i}.yml"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ABSERVE_", "COMPOSE_", "VLLM_"))}
    env |= {"HOME": "/nonexistent-home",
            "ABSERVE_HOST_PYTHON": "/opt/python3.11", "ABSERVE_HOST_PROJECT": str(ROOT)}
    cmd = [str(compose_binary()), "--project-directory", str(ROOT)]
    for path in files:
        cmd += ["-f", path]
    cmd += ["--env-file", str(ENV_EXAMPLE), "--env-file", str(env_file), "config", "--format", "json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.mark.process
def test_three_arms_on_the_cpu_override_are_three_arm_services(tmp_path: Path) -> None:
    model = resolve(three_arms(), tmp_path, "cpu")
    services = model["services"]
    arms = {name: s for name, s in services.items() if name.startswith("vllm-")}
    assert set(arms) == {"vllm-a", "vllm-b", "vllm-hybrid"}
    lookups = {name: s["environment"]["ABSERVE_MM_LOOKUP"] for name, s in arms.items()}
    assert lookups == {"vllm-a": "linear", "vllm-b": "bisect", "vllm-hybrid": "hybrid"}
    hybrid, b = services["vllm-hybrid"], services["vllm-b"]
    # The CPU override's arm, made the hybrid arm's: the host runtime, nothing built, no GPU.
    assert hybrid["image"] == "abserve/host-runtime:local"
    assert "build" not in hybrid
    assert "deploy" not in hybrid
    assert hybrid["entrypoint"] == b["entrypoint"]
    assert list(hybrid["depends_on"]) == ["model-fetch"]  # the CPU arms start together
    assert hybrid["cpuset"] == hybrid["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert hybrid["command"] == b["command"]  # no arm args: the same server command
    assert hybrid["networks"] == b["networks"]
    assert not hybrid.get("ports")
    mounts = {s: {m["target"]: m["source"] for m in arms[s]["volumes"]} for s in arms}
    assert mounts["vllm-hybrid"]["/telemetry"].endswith("/telemetry/hybrid")
    assert len({m["/telemetry"] for m in mounts.values()}) == 3, "each arm its own telemetry"
    assert len({m["/vllm-cache"] for m in mounts.values()}) == 3, "each arm its own vLLM cache"
    assert "vllm-cache-hybrid" in model["volumes"]
    assert {k for k in mounts["vllm-hybrid"]} == {k for k in mounts["vllm-b"]}


@pytest.mark.process
def test_the_orchestrator_waits_for_every_arm_and_each_is_laid_out(tmp_path: Path) -> None:
    raw = three_arms()
    services = resolve(raw, tmp_path, "cpu")["services"]
    depends = services["orchestrator"]["depends_on"]
    assert {k for k, v in depends.items() if v["condition"] == "service_healthy"} >= {
        "vllm-a", "vllm-b", "vllm-hybrid"}
    # The router's arms (given or derived) are each the URL of a service that exists.
    experiment = ComposeExperiment.model_validate(raw)
    urls = {arm: spec["url"] for arm, spec in experiment.router["arms"].items()}
    assert set(urls) == {"a", "b", "hybrid"}
    for url in urls.values():
        assert url.removeprefix("http://").split(":")[0] in services
    assert services["prepare"]["environment"]["ABSERVE_ARMS"] == "a b hybrid"
    assert services["vllm-hybrid"]["environment"]["ABSERVE_MUTANT"] == ""


@pytest.mark.process
def test_an_extra_arm_on_a_gpu_host_gets_its_image_args_gpu_and_start_turn(tmp_path: Path) -> None:
    raw = three_arms(RELEASE, arm="c", lookup="bisect", image="vllm/vllm-openai:v0.34.0",
                     args={"--max-num-seqs": 8})
    model = resolve(raw, tmp_path, "gpu")
    services = model["services"]
    c, a = services["vllm-c"], services["vllm-a"]
    assert c["build"]["args"]["VLLM_IMAGE"] == "vllm/vllm-openai:v0.34.0"
    assert c["build"]["args"]["EXTRA_CA_CERTS"] == ""  # the CA argument of every build
    assert c["build"]["dockerfile"] == "docker/vllm.Dockerfile"
    assert c["image"].startswith("abserve/vllm-c:vllm-vllm-openai-v0.34.0-")
    assert c["command"] == a["command"] + ["--max-num-seqs=8"]
    assert c["environment"]["ABSERVE_MM_LOOKUP"] == "bisect"
    (device,) = c["deploy"]["resources"]["reservations"]["devices"]
    assert device["device_ids"] == ["0"]
    assert device["capabilities"] == ["gpu"]
    # One after another: after the last static arm (a2, the floor), each healthy first.
    assert {k: v["condition"] for k, v in c["depends_on"].items()} == {"vllm-a2": "service_healthy"}
    assert services["orchestrator"]["depends_on"]["vllm-c"]["condition"] == "service_healthy"
    assert services["prepare"]["environment"]["ABSERVE_ARMS"] == "a b a2 c"


def test_the_gpu_id_of_an_extra_arm_is_its_own_variable(tmp_path: Path) -> None:
    experiment = ComposeExperiment.model_validate(three_arms(CONFIG_3B, arm="c"))
    text = extra_arms_compose(experiment, (ROOT / "docker-compose.yml").read_text())
    assert "${ABSERVE_GPU_C:-0}" in text
    assert "ABSERVE_GPU_B" not in text
    assert "${ABSERVE_LOOKUP_C:-}" in text  # no default lookup: empty is vLLM untouched
    assert "${ABSERVE_MUTANT_C:-}" in text
    assert "ABSERVE_LOOKUP_B" not in text
    cpu = extra_arms_compose(experiment, (ROOT / "docker-compose.cpu.yml").read_text())
    assert "cpuset: ${ABSERVE_GPU_C:-0}" in cpu
    assert "!reset" in cpu
    assert "!override" in cpu


def test_existing_configs_need_no_generated_file() -> None:
    for path in [*sorted((ROOT / "configs").glob("gpu-*.yaml")), CPU_CONFIG]:
        experiment = load_experiment(path)  # extends: resolved, as signoff.sh reads it
        for source in ("docker-compose.yml", "docker-compose.cpu.yml"):
            assert extra_arms_compose(experiment, (ROOT / source).read_text()) == "", path.name


def test_compose_env_writes_each_extra_arms_variables() -> None:
    raw = three_arms(args={"--max-num-seqs": 4})
    env = compose_env(ComposeExperiment.model_validate(raw), "configs/x.yaml")
    assert env["ABSERVE_ARMS"] == "a b hybrid"
    assert env["ABSERVE_LOOKUP_HYBRID"] == "hybrid"
    assert shlex.split(env["VLLM_ARM_ARGS_HYBRID"]) == ["--max-num-seqs=4"]
    assert env["ABSERVE_VLLM_IMAGE_HYBRID"] == env["ABSERVE_VLLM_TAG_HYBRID"] == ""
    assert env["ABSERVE_LOOKUP_A2"] == ""  # a static arm the config lacks stays empty


@pytest.mark.parametrize("name", ["C_1", "Hybrid", "1x", "x" * 17])
def test_an_arm_name_compose_cannot_name_a_service_by_is_refused(name: str) -> None:
    raw = three_arms(arm=name)
    with pytest.raises(ValueError, match="not a compose arm name"):
        ComposeExperiment.model_validate(raw)


def test_main_prints_the_arms_compose_file_from_stdin(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    path = tmp_path / "c3.yaml"
    path.write_text(yaml.safe_dump(three_arms()))
    monkeypatch.setattr("sys.stdin", io.StringIO((ROOT / "docker-compose.yml").read_text()))
    assert main(["--arms-compose", str(path)]) == 0
    generated = yaml.safe_load(capsys.readouterr().out)
    assert set(generated["services"]) == {"vllm-hybrid", "orchestrator"}
    assert generated["services"]["orchestrator"] == {
        "depends_on": {"vllm-hybrid": {"condition": "service_healthy"}}}


@pytest.mark.process
def test_prepare_lays_out_every_arm_and_refuses_a_name_that_is_not_one(tmp_path: Path) -> None:
    def prepare(arms: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "ABSERVE_RUNS_ROOT": str(tmp_path / "runs"),
               "ABSERVE_RUN_ID": f"r{len(arms)}",
               "ABSERVE_UID": str(os.getuid()), "ABSERVE_GID": str(os.getgid()), "ABSERVE_ARMS": arms}
        return subprocess.run(["sh", str(ROOT / "docker" / "prepare-run.sh")], env=env,
                              capture_output=True, text=True, timeout=30, check=False)

    assert prepare("a b hybrid").returncode == 0
    assert sorted(p.name for p in (tmp_path / "runs" / "r10" / "telemetry").iterdir()) == ["a", "b", "hybrid"]
    bad = prepare("a b ../x")
    assert bad.returncode == 1
    assert "not an arm name" in bad.stderr


# ---- scripts/signoff.sh makes one generated file per compose file and runs with them --------

SIGNOFF_DOCKER = """
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(["COMPOSE_FILE", os.environ.get("COMPOSE_FILE", "")]) + "\\n")
if "--arms-compose" in args:
    source = sys.stdin.read()
    if "vllm-b:" in source:
        print("services: {vllm-hybrid: {image: x}}  # from " + str(len(source)))
elif "abserve.deploy.compose_env" in args:
    print("ABSERVE_CONFIG=configs/c3.yaml")
    print("ABSERVE_ARMS=a b hybrid")
elif "up" in args:
    sys.exit(2)  # the orchestrator's code: inconclusive
elif "ps" in args and "-q" in args:
    print("cid")
elif "ps" in args:
    print("orchestrator exited")
elif args[0] == "inspect":
    print("2026-12-01T11:40:41.1Z")
"""


@pytest.mark.process
def test_signoff_runs_the_stack_with_a_generated_file_per_compose_file(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "configs").mkdir()
    shutil.copy(ROOT / "scripts" / "signoff.sh", tree / "scripts" / "signoff.sh")
    for name in ("docker-compose.yml", "docker-compose.cpu.yml"):
        shutil.copy(ROOT / name, tree / name)
    (tree / "extra.yml").write_text("services: {}\n")  # a compose file without vllm-b
    (tree / "configs" / "c3.yaml").write_text("name: x\n")
    (tree / ".env").write_text("ABSERVE_RUNS_DIR=./runs\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "docker", SIGNOFF_DOCKER)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "HOME": str(tmp_path),
           "COMPOSE_FILE": "docker-compose.yml:docker-compose.cpu.yml:extra.yml",
           "ABSERVE_RUN_ID_OVERRIDE": "r3", "ABSERVE_SKIP_PREFLIGHT": "1"}
    result = subprocess.run(["bash", str(tree / "scripts" / "signoff.sh"), "configs/c3.yaml"],
                            env=env, cwd=tree, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    made = calls(log)
    generate = [c for c in made if "--arms-compose" in c]
    assert len(generate) == 3, "one per compose file"
    run_dir = tree / "runs" / "r3"
    assert (run_dir / "arms.0.yml").read_text() != (run_dir / "arms.1.yml").read_text()
    assert (run_dir / "arms.2.yml").read_text() == ""
    want = "docker-compose.yml:docker-compose.cpu.yml:extra.yml:./runs/r3/arms.0.yml:./runs/r3/arms.1.yml"
    # Every compose command after the generation sees the generated files (build, up, down).
    last = max(i for i, c in enumerate(made) if "--arms-compose" in c)
    after = made[last + 2:]  # each call logs its argv, then its COMPOSE_FILE
    seen = {c[1] for c in after if c[0] == "COMPOSE_FILE"}
    assert seen == {want}, seen
    build = next(c for c in after if c[0] == "docker" and "build" in c)
    assert build[build.index("build") + 1:] == ["model-fetch", "vllm-a", "vllm-b", "vllm-hybrid"]
    assert "extra arms hybrid" in result.stdout
