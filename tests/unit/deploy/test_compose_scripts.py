"""The GPU-host glue: ``abserve.deploy.compose_env`` and the scripts compose and signoff.sh run.

The scripts run for real under bash/sh; only the programs they start (locust, abserve,
docker) are replaced by small recording fakes on PATH, since there is no GPU or Docker
engine here. The Locust command lines run-load.sh builds are then parsed by Locust's own
parser with the project's locustfile loaded, so an option the locustfile lacks fails here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from abserve.deploy.compose_env import (
    ComposeExperiment,
    LoadItem,
    compose_env,
    load_experiment,
    main,
    render_args,
    render_env_file,
)

ROOT = Path(__file__).resolve().parents[3]
CONFIG_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"

RECORDER = """#!/usr/bin/env python3
import json, os, sys
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
        (lambda c: c["arms"]["b"].update({"lookup": None}), "arm 'b' has no lookup"),
        (lambda c: c["arms"].pop("b"), "arm 'b' is required"),
        (lambda c: c["arms"].update({"C_1": {"lookup": "linear"}}), "not a compose arm name"),
        (lambda c: c["arms"].update({"c": {"lookup": "linear"}}), "must equal arms"),
        (lambda c: c["router"]["arms"]["b"].update({"url": "http://10.0.0.1:8000"}), "vllm-b:8000"),
        (lambda c: c["router"]["arms"].pop("a2"), "must equal arms"),
    ],
)
def test_configs_that_do_not_fit_the_compose_file_are_refused(edit: Any, message: str) -> None:
    config = raw_3b()
    edit(config)
    with pytest.raises(ValueError, match=message):
        ComposeExperiment.model_validate(config)


def test_without_a2_the_noise_floor_profile_is_off() -> None:
    config = raw_3b()
    config["arms"].pop("a2")
    config["router"]["arms"].pop("a2")
    env = compose_env(ComposeExperiment.model_validate(config), "configs/x.yaml")
    assert env["COMPOSE_PROFILES"] == ""


def test_load_plan_items_carry_their_overrides() -> None:
    item = LoadItem(profile="chunk-boundary", requests=5, set={"a.b": [1, 2], "url": "http://h:1"})
    assert item.plan_item() == "chunk-boundary:5:a.b=[1,2];url=http://h:1"
    with pytest.raises(ValueError, match="whitespace"):
        LoadItem(profile="p", requests=1, set={"text": "two words"}).plan_item()


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


# ---- docker/run-load.sh ------------------------------------------------------------------


def run_load(tmp_path: Path, plan: str, rc: int = 0, workers: str = "2") -> tuple[int, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "locust", f"sys.exit({rc})")
    log = tmp_path / "calls.jsonl"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
        "ABSERVE_LOAD_PLAN": plan, "ABSERVE_LOAD_OUT": str(tmp_path / "load"),
        "ABSERVE_LOCUST_WORKERS": workers, "ABSERVE_LOAD_USERS": "1",
        "ABSERVE_TARGET": "http://router:8100", "ABSERVE_RUN_ID": "r1",
    }
    (tmp_path / "[448,448]").touch()  # a file a glob of the plan would match
    result = subprocess.run(["sh", str(ROOT / "docker" / "run-load.sh")], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=30, check=False)
    return result.returncode, calls(log)


PARSE = """
import json, runpy, sys
runpy.run_path(sys.argv[1])  # the locustfile registers its --abserve-* options
from locust.argument_parser import get_parser
print(json.dumps([vars(get_parser().parse_args(argv)) for argv in json.load(sys.stdin)], default=str))
"""


def parse_with_locust(argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Locust's own parser on each argv, in a subprocess (importing locust monkey-patches)."""
    result = subprocess.run([sys.executable, "-c", PARSE, str(ROOT / "loadtest" / "locustfile.py")],
                            input=json.dumps(argvs), capture_output=True, text=True, timeout=60,
                            check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    return list(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.process
def test_run_load_runs_every_profile_with_options_the_locustfile_accepts(tmp_path: Path) -> None:
    plan = compose_env(load_experiment(CONFIG_3B), "c")["ABSERVE_LOAD_PLAN"]
    rc, made = run_load(tmp_path, plan)
    assert rc == 0
    assert (tmp_path / "load" / "exit_code").read_text().strip() == "0"
    parsed = [argparse.Namespace(**p) for p in parse_with_locust([call[1:] for call in made])]
    profiles = [item.profile for item in load_experiment(CONFIG_3B).load.profiles]
    assert [p.abserve_profile for p in parsed] == profiles
    chunk = next(p for p in parsed if p.abserve_profile == "chunk-boundary")
    assert chunk.abserve_requests == 300
    assert chunk.master
    assert chunk.expect_workers == 2
    assert chunk.abserve_set == (
        "chunk_boundary.max_num_batched_tokens=512;chunk_boundary.tokenize_url=http://vllm-a:8000;"
        "images.sizes=[[448,448]]"
    )
    assert all(p.num_users == 2 for p in parsed)  # raised to one user per worker
    assert parsed[1].abserve_set == ""


@pytest.mark.process
def test_run_load_stops_at_the_first_failed_profile_and_records_its_code(tmp_path: Path) -> None:
    rc, made = run_load(tmp_path, "many-items:10 interleaved:10", rc=3)
    assert rc == 0  # recorded for the report (record_load), which says why the run is invalid
    assert len(made) == 1
    assert (tmp_path / "load" / "exit_code").read_text().strip() == "3"


# ---- docker/run-router.sh ----------------------------------------------------------------


def start_router(tmp_path: Path, body: str) -> tuple[subprocess.Popen[str], Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "abserve", body)
    log, done = tmp_path / "calls.jsonl", tmp_path / "exit_code"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "ABSERVE_LOAD_DONE": str(done)}
    proc = subprocess.Popen(["sh", str(ROOT / "docker" / "run-router.sh"), "/app/configs/x.yaml"],
                            env=env, text=True, stderr=subprocess.PIPE)
    return proc, log, done


@pytest.mark.process
def test_run_router_stops_the_router_gracefully_when_the_load_is_done(tmp_path: Path) -> None:
    body = ("import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
            "while True: time.sleep(0.05)")
    proc, log, done = start_router(tmp_path, body)
    time.sleep(1.5)
    assert proc.poll() is None, "the router must run until the load is done"
    done.write_text("0\n")
    assert proc.wait(timeout=10) == 0
    assert calls(log) == [["abserve", "router", "--config", "/app/configs/x.yaml"]]


@pytest.mark.process
def test_run_router_counts_a_router_ended_by_its_sigterm_as_done(tmp_path: Path) -> None:
    # The real router drains, flushes and then ends by the SIGTERM it was sent (status 143):
    # in the first real compose run that failed the router service, so the report never ran.
    body = ("import os, signal, time\n"
            "def stop(*a):\n    signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "signal.signal(signal.SIGTERM, stop)\nwhile True: time.sleep(0.05)")
    proc, _, done = start_router(tmp_path, body)
    time.sleep(1.5)
    done.write_text("0\n")
    assert proc.wait(timeout=10) == 0


@pytest.mark.process
def test_run_router_exits_with_the_routers_code_when_it_dies_early(tmp_path: Path) -> None:
    proc, _, _ = start_router(tmp_path, "sys.exit(4)")
    assert proc.wait(timeout=10) == 4


# ---- scripts/signoff.sh ------------------------------------------------------------------

DOCKER = """
args = sys.argv[1:]
if args[:2] == ["compose", "version"] or "build" in args or "down" in args or "logs" in args:
    sys.exit(0)
if "abserve.deploy.compose_env" in args:  # compose run --entrypoint python prepare -m ...
    sys.stdin.read()  # as `docker compose run` does: it forwards its stdin to the container
    print("ABSERVE_CONFIG=configs/gpu-x.yaml")
    if os.environ.get("FAKE_PLAN"):
        print("ABSERVE_LOAD_PLAN=" + os.environ["FAKE_PLAN"])
elif "up" in args:
    sys.exit(int(os.environ.get("FAKE_UP_RC", "0")))
elif "ps" in args:
    print(os.environ.get("FAKE_REPORT_ID", ""))
elif args[0] == "wait":
    print(os.environ["FAKE_REPORT_CODE"])
elif args[0] == "inspect":
    print(os.environ.get("FAKE_STARTED_AT", "2026-12-01T11:40:41.1Z"))
"""


def signoff(tmp_path: Path, env_file: str | None, stdin: str = "",
            **fakes: str) -> tuple[int, str, list[list[str]]]:
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "configs").mkdir()
    shutil.copy(ROOT / "scripts" / "signoff.sh", tree / "scripts" / "signoff.sh")
    (tree / "configs" / "gpu-x.yaml").write_text("name: x\n")
    if env_file is not None:
        (tree / ".env").write_text(env_file)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "docker", DOCKER)
    log = tmp_path / "calls.jsonl"
    # The GPU preflight has its own tests (tests/unit/deploy/test_preflight_*.py); no GPU or abserve here.
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "ABSERVE_SKIP_PREFLIGHT": "1",
           **fakes}
    # As gpu-rotation.sh runs it: in a loop reading its plan from stdin, which must survive.
    script = f'bash "{tree / "scripts" / "signoff.sh"}" configs/gpu-x.yaml --scale locust-worker=3; ' \
             'rc=$?; echo "stdin left: $(cat)"; exit $rc'
    result = subprocess.run(["bash", "-c", script], input=stdin,
                            env=env, capture_output=True, text=True, timeout=30, check=False)
    return result.returncode, result.stderr + result.stdout, calls(log)


GOOD_ENV = "ABSERVE_API_KEY=0123456789abcdef-key\nABSERVE_RUNS_DIR=./runs\n"


@pytest.mark.parametrize("code", ["0", "2"])
@pytest.mark.process
def test_signoff_exits_with_the_reports_code(tmp_path: Path, code: str) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, FAKE_REPORT_ID="cid", FAKE_REPORT_CODE=code)
    assert rc == int(code), out
    up = next(c for c in made if "up" in c)
    assert up[-3:] == ["--detach", "--scale", "locust-worker=3"]
    assert "--env-file" in up
    assert any(a.endswith("/compose.env") for a in up)
    assert ["docker", "wait", "cid"] in made
    assert any("down" in c for c in made)


@pytest.mark.process
def test_signoff_watches_the_run_from_its_store_while_it_waits(tmp_path: Path) -> None:
    plan = "multi-image-long-context:8:text.words=[200,600];max_tokens=8 many-items:12"
    rc, out, made = signoff(tmp_path, GOOD_ENV, FAKE_REPORT_ID="cid", FAKE_REPORT_CODE="0",
                            FAKE_PLAN=plan, ABSERVE_RUN_ID_OVERRIDE="r1")
    assert rc == 0, out
    watch = next(c for c in made if "watch" in c)
    assert watch[watch.index("--entrypoint") + 1:] == [
        "abserve", "prepare", "watch", "r1", "--db", "sqlite:////runs/r1/abserve.db",
        "--policy", "/app/configs/policy/gpu.yaml", "--budget", "20req", "--every", "30", "--wait", "86400"]
    assert ["docker", "rm", "-f", "abserve-watch-r1"] in made  # stopped when the report ended
    _, _, quiet = signoff(tmp_path / "off", GOOD_ENV, FAKE_REPORT_ID="cid", FAKE_REPORT_CODE="0",
                          ABSERVE_WATCH="0")
    assert not any("watch" in c for c in quiet)


@pytest.mark.process
def test_signoff_leaves_its_callers_stdin_alone(tmp_path: Path) -> None:
    # gpu-rotation.sh feeds its block plan to a `while read` loop around signoff.sh; the first
    # real rotation ran 1 block of 2 because `docker compose run` swallowed the plan.
    rc, out, _ = signoff(tmp_path, GOOD_ENV, stdin="1 1 0\n", FAKE_REPORT_ID="cid", FAKE_REPORT_CODE="2")
    assert rc == 2, out
    assert "stdin left: 1 1 0" in out


@pytest.mark.process
def test_signoff_is_invalid_when_the_report_never_ran(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, FAKE_UP_RC="1", FAKE_REPORT_CODE="0")
    assert rc == 3
    assert "the report never ran" in out
    assert any("down" in c for c in made), "the stack is torn down on failure too"


@pytest.mark.process
def test_signoff_is_invalid_when_the_report_was_created_but_never_started(tmp_path: Path) -> None:
    # `docker wait` answers 0 for a container that never started (its load failed first):
    # found by the first real compose run, which said "pass" for a load that sent nothing.
    rc, out, _ = signoff(tmp_path, GOOD_ENV, FAKE_REPORT_ID="cid", FAKE_REPORT_CODE="0",
                         FAKE_STARTED_AT="0001-01-01T00:00:00Z")
    assert rc == 3
    assert "the report never ran" in out


@pytest.mark.parametrize(
    ("env_file", "message"),
    [(None, "no .env"), ("ABSERVE_API_KEY=\n", "ABSERVE_API_KEY"), ("ABSERVE_API_KEY=short\n", "16+")],
)
@pytest.mark.process
def test_signoff_refuses_to_start_without_a_key(tmp_path: Path, env_file: str | None, message: str) -> None:
    rc, out, made = signoff(tmp_path, env_file, FAKE_REPORT_CODE="0")
    assert rc == 4  # refused before anything ran: a tool error, not an invalid run
    assert message in out
    assert not any("up" in c for c in made)
