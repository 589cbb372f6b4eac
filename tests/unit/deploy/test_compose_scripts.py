"""The GPU-host glue: ``abserve.deploy.compose_env`` and ``scripts/signoff.sh``.

signoff.sh runs for real under bash; only the program it starts (docker) is replaced by a
small recording fake on PATH, since there is no GPU or Docker engine here. The fake answers as
``docker compose up --exit-code-from orchestrator`` does: with the orchestrator's exit code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from abserve.deploy.compose_env import (
    ComposeExperiment,
    compose_env,
    main,
    render_args,
    render_env_file,
)

ROOT = Path(__file__).resolve().parents[3]
CONFIG_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"

# The fakes run under this interpreter without site (-S): `#!/usr/bin/env python3` went through
# whatever python3 PATH finds first (here a pyenv shim: ~0.3 s a call, against ~0.02 s).
RECORDER = f"#!{sys.executable} -S\n" + """import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
{body}
"""


def fake(bin_dir: Path, name: str, body: str = "") -> None:
    path = bin_dir / name
    path.write_text(RECORDER.format(body=body))
    path.chmod(0o755)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# router.arms as a config may give it (the shipped ones leave it out: derived from arms:)
ROUTED = {arm: {"url": f"http://vllm-{arm}:8000"} for arm in ("a", "b", "a2")}


def raw_3b() -> dict[str, Any]:
    return dict(yaml.safe_load(CONFIG_3B.read_text()))


# ---- compose_env -------------------------------------------------------------------------


def test_server_args_render_as_argv() -> None:
    argv = render_args({"--a": 1, "--flag": True, "--off": False, "--json": {"image": 4, "video": 0}})
    assert argv == ["--a=1", "--flag", '--json={"image":4,"video":0}']


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["server"]["args"].update({"--allowed-local-media-path": "/"}), "forbidden"),
        (lambda c: c["server"]["args"].update({"--port": 9}), "set by docker-compose.yml"),
        (lambda c: c["server"]["env"].update({"VLLM_SECRET": "1"}), "does not pass"),
        (lambda c: c["arms"].pop("b"), "arm 'b' is required"),
        (lambda c: c["arms"].update({"C_1": {"lookup": "linear"}}), "not a compose arm name"),
        (lambda c: c["arms"].update({"c": {"lookup": "linear"}}) or c["router"].update(arms=ROUTED),
         "arm c has no router entry"),
        (lambda c: c["router"].update(arms={**ROUTED, "b": {"url": "http://10.0.0.1:8000"}}), "vllm-b:8000"),
        (lambda c: c["router"].update(arms={"a": ROUTED["a"], "b": ROUTED["b"]}),
         "arm a2 has no router entry"),
        (lambda c: c["router"].update(arms={**ROUTED, "d": {"url": "http://vllm-d:8000"}}), "names no arm"),
    ],
)
def test_configs_that_do_not_fit_the_compose_file_are_refused(edit: Any, message: str) -> None:
    config = raw_3b()
    edit(config)
    with pytest.raises(ValueError, match=message):
        ComposeExperiment.model_validate(config)


def test_without_a2_the_noise_floor_profile_is_off() -> None:
    config = raw_3b()
    config["arms"].pop("a2")  # router.arms is derived
    env = compose_env(ComposeExperiment.model_validate(config), "configs/x.yaml")
    assert env["COMPOSE_PROFILES"] == ""


def test_env_file_values_that_compose_would_reinterpret_are_refused() -> None:
    assert render_env_file({"A": "x y", "B": ""}) == "A=x y\nB=\n"
    for value in ["$HOME", "'quoted", "a #comment", "two\nlines"]:
        with pytest.raises(ValueError, match="literally"):
            render_env_file({"A": value})


def test_main_prints_the_env_file_or_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(CONFIG_3B)]) == 0
    assert "ABSERVE_MM_LOOKUP_SCOPE=runner" in capsys.readouterr().out
    bad = raw_3b()
    bad["server"]["args"]["--allowed-local-media-path"] = "/"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert main([str(tmp_path / "bad.yaml")]) == 2
    assert "forbidden" in capsys.readouterr().err


# ---- scripts/signoff.sh ------------------------------------------------------------------

# As Docker answers signoff.sh: `up --exit-code-from orchestrator` exits with the orchestrator's
# code (FAKE_UP_RC), `ps` lists the services that ran (FAKE_PS), `inspect` says when the
# orchestrator's container started (FAKE_STARTED_AT; 0001-... for one created, never started).
DOCKER = """
args = sys.argv[1:]
if args[:2] == ["compose", "version"] or "build" in args or "down" in args or "logs" in args:
    sys.exit(0)
if "--arm-images" in args:  # compose_env --arm-images over `docker compose config` on stdin
    sys.stdin.read()
    print("a=abserve/vllm-a:v33 b=abserve/vllm-b:t34")
elif "config" in args:  # the resolved compose file (read by --arm-images above)
    print("services: {}")
elif "abserve.deploy.compose_env" in args:  # compose run --entrypoint python prepare -m ...
    sys.stdin.read()  # as `docker compose run` does: it forwards its stdin to the container
    print("ABSERVE_CONFIG=" + os.environ.get("FAKE_CONFIG", "configs/gpu-x.yaml"))
    print("ABSERVE_ARMS=a b")
    if os.environ.get("FAKE_PROFILES"):  # the run's compose profiles (noise-floor: arm a2)
        print("COMPOSE_PROFILES=" + os.environ["FAKE_PROFILES"])
    print("ABSERVE_VLLM_IMAGE_B=vllm/vllm-openai:v0.34.0")  # arm b's own base image and tag
    print("ABSERVE_VLLM_TAG_B=t34")
elif args[:2] == ["image", "inspect"]:  # the id of the image built for an arm
    print("sha256:" + args[-1].removeprefix("abserve/"))
elif "up" in args:
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(["env", os.environ.get("ABSERVE_ARM_IMAGES", "")]) + "\\n")
    sys.exit(int(os.environ.get("FAKE_UP_RC", "0")))
elif "ps" in args and "-q" in args:
    print("cid")
elif "ps" in args:
    print(os.environ.get("FAKE_PS", "prepare exited\\norchestrator exited\\nvllm-a exited"))
elif args[0] == "inspect":
    print(os.environ.get("FAKE_STARTED_AT", "2026-12-01T11:40:41.1Z"))
"""


def signoff(tmp_path: Path, env_file: str | None, stdin: str = "", config: str = "configs/gpu-x.yaml",
            docker: str = DOCKER, **fakes: str) -> tuple[int, str, list[list[str]]]:
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "signoff.sh", tree / "scripts" / "signoff.sh")
    (tree / config).parent.mkdir(parents=True, exist_ok=True)
    (tree / config).write_text("name: x\n")
    if env_file is not None:
        (tree / ".env").write_text(env_file)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "docker", docker)
    log = tmp_path / "calls.jsonl"
    # The GPU preflight has its own tests (tests/unit/deploy/test_preflight_*.py); no GPU or abserve here.
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "ABSERVE_SKIP_PREFLIGHT": "1",
           "FAKE_CONFIG": config, **fakes}
    # As gpu-rotation.sh runs it: in a loop reading its plan from stdin, which must survive.
    script = f'cd "{tree}" && bash scripts/signoff.sh {config} --quiet-pull; ' \
             'rc=$?; echo "stdin left: $(cat)"; exit $rc'
    result = subprocess.run(["bash", "-c", script], input=stdin,
                            env=env, capture_output=True, text=True, timeout=30, check=False)
    return result.returncode, result.stderr + result.stdout, calls(log)


GOOD_ENV = "ABSERVE_RUNS_DIR=./runs\n"  # no key: the orchestrator makes its own


@pytest.mark.parametrize(("code", "said"), [("0", "pass"), ("1", "fail"), ("2", "inconclusive"),
                                            ("3", "invalid"), ("6", "error-rate limit")])
@pytest.mark.process
def test_signoff_exits_with_the_orchestrators_code(tmp_path: Path, code: str, said: str) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, FAKE_UP_RC=code)
    assert rc == int(code), out
    assert said in out
    up = next(c for c in made if "up" in c)
    assert up[up.index("up"):] == ["up", "--exit-code-from", "orchestrator", "--attach", "orchestrator",
                                   "--quiet-pull"]  # the caller's options last
    assert "--env-file" in up
    assert any(a.endswith("/compose.env") for a in up)
    assert not any("wait" in c or "watch" in c for c in made)  # compose itself waits
    assert any("down" in c for c in made)


@pytest.mark.process
def test_signoff_hands_the_orchestrator_each_arms_image(tmp_path: Path) -> None:
    shared = "ABSERVE_VLLM_IMAGE=vllm/vllm-openai:v0.33.0\nABSERVE_VLLM_TAG=v33\n"
    rc, out, made = signoff(tmp_path, GOOD_ENV + shared)
    assert rc == 0, out
    (images,) = [c[1] for c in made if c[0] == "env"]  # ABSERVE_ARM_IMAGES as `up` saw it
    # Each arm: the image compose runs for it (compose_env --arm-images over the resolved
    # compose file), @ that image's id.
    assert images.split() == ["a=abserve/vllm-a:v33@sha256:vllm-a:v33",
                              "b=abserve/vllm-b:t34@sha256:vllm-b:t34"]


@pytest.mark.process
def test_signoff_leaves_its_callers_stdin_alone(tmp_path: Path) -> None:
    # gpu-rotation.sh feeds its block plan to a `while read` loop around signoff.sh; the first
    # real rotation ran 1 block of 2 because `docker compose run` swallowed the plan.
    rc, out, _ = signoff(tmp_path, GOOD_ENV, stdin="1 1 0\n", FAKE_UP_RC="2")
    assert rc == 2, out
    assert "stdin left: 1 1 0" in out


@pytest.mark.process
def test_signoff_is_invalid_when_the_orchestrator_never_ran(tmp_path: Path) -> None:
    # An arm that never became healthy: compose never starts the orchestrator, and `up` fails.
    rc, out, made = signoff(tmp_path, GOOD_ENV, FAKE_UP_RC="1", FAKE_PS="prepare exited\nvllm-a exited")
    assert rc == 3
    assert "the orchestrator never ran" in out
    assert any("down" in c for c in made), "the stack is torn down on failure too"


@pytest.mark.process
def test_signoff_is_invalid_when_the_orchestrator_was_created_but_never_started(tmp_path: Path) -> None:
    # A container created but never started reads as exited: that is no verdict, whatever `up` says.
    rc, out, _ = signoff(tmp_path, GOOD_ENV, FAKE_UP_RC="0", FAKE_STARTED_AT="0001-01-01T00:00:00Z")
    assert rc == 3
    assert "the orchestrator never ran" in out


@pytest.mark.parametrize(
    ("config", "env_file", "message"),
    [("configs/gpu-x.yaml", None, "no .env"),
     ("elsewhere/gpu-x.yaml", GOOD_ENV, "the stack mounts only configs/ and traffic/"),
     ("runs/gpu-x.yaml", GOOD_ENV, "move the config there")],
)
@pytest.mark.process
def test_signoff_refuses_what_the_stack_cannot_run(tmp_path: Path, config: str, env_file: str | None,
                                                   message: str) -> None:
    rc, out, made = signoff(tmp_path, env_file, config=config)
    assert rc == 4  # refused before anything ran: a tool error, not an invalid run
    assert message in out
    assert not any("up" in c for c in made)


@pytest.mark.process
def test_signoff_runs_a_config_under_traffic(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, config="traffic/mine.yaml")
    assert rc == 0, out
    derive = next(c for c in made if "abserve.deploy.compose_env" in c)
    assert derive[-1] == "traffic/mine.yaml"
