"""The compose check removes only what it created, and only in an engine it may use (issue 29 item 8).

``scripts/compose-check.sh``'s own ``teardown`` runs for real under bash (the script sourced:
its functions only) against a recording fake ``docker`` on PATH that lists a few objects for
any filter; ``scripts/compose-engine.sh start`` and the check itself run against a fake engine
that already answers. The engine-backed check is tests/compose_stack.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.unit.deploy.test_compose_scripts import calls, fake

ROOT = Path(__file__).resolve().parents[3]
CHECK_ID = "t1"
PROJECT = f"abserve-check-{CHECK_ID}"
SCRIPTS = ["compose-check.sh", "compose-engine.sh", "compose-faults.sh", "compose-images.sh"]

# Answers every listing with two ids made from its filter, so each removal can be traced back
# to the listing (and the label) its ids came from; logs COMPOSE_PROJECT_NAME with `compose`.
DOCKER = """
args = sys.argv[1:]
if args[:1] == ["compose"]:
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(["project", os.environ.get("COMPOSE_PROJECT_NAME", "")]) + "\\n")
    sys.exit(0)
if args[:1] == ["info"]:
    sys.exit(int(os.environ.get("FAKE_INFO_RC", "1")))
if "--quiet" in args or "-q" in args:
    label = args[args.index("--filter") + 1] if "--filter" in args else "ALL"
    kind = "container" if args[0] == "ps" else args[0]
    print(f"{kind}|{label}|1")
    print(f"{kind}|{label}|2")
"""


def tree(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    return repo


def fake_bin(tmp_path: Path, docker: str = DOCKER) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake(bin_dir, "docker", docker)
    for name in ("dockerd", "iptables-save", "apt-get"):  # never run for real by these tests
        fake(bin_dir, name)
    return bin_dir


def run_teardown(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    repo = tree(tmp_path)
    log = tmp_path / "calls.jsonl"
    script = ('source scripts/compose-check.sh; engine_running_before=1; engine_was_ours=0; '
              'mkdir -p "$WORK"; teardown')
    base = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "FAKE_LOG": str(log),
            "ABSERVE_CHECK_ID": CHECK_ID, "HOME": str(tmp_path),
            "ABSERVE_DOCKER_ROOT": str(tmp_path / "engine")}
    result = subprocess.run(["bash", "-c", script], cwd=repo, env=base | env, capture_output=True,
                            text=True, timeout=60, check=False)
    return result, calls(log)


@pytest.mark.process
def test_teardown_removes_only_what_carries_the_checks_project_or_label(tmp_path: Path) -> None:
    result, made = run_teardown(tmp_path)
    assert result.returncode == 0, result.stderr
    docker = [c[1:] for c in made if c[0] == "docker"]
    assert not [c for c in docker if "prune" in c], "no prune of any kind"
    ours = {f"label=com.docker.compose.project={PROJECT}", f"label=com.abserve.check={CHECK_ID}"}
    listings = [c for c in docker if "--quiet" in c]
    assert listings, "teardown lists the check's objects by label"
    for listing in listings:
        assert listing[listing.index("--filter") + 1] in ours, listing
    removals = [c for c in docker if c[:1] == ["rm"] or c[1:2] == ["rm"]]
    assert {c[0] if c[0] != "rm" else "container" for c in removals} == {
        "container", "network", "volume", "image"}
    for removal in removals:
        ids = [word for word in removal if "|" in word]
        assert ids, f"a removal without listed ids: {removal}"
        assert {word.split("|")[1] for word in ids} <= ours, removal
    images = [c for c in removals if c[0] == "image"]
    assert all(word.split("|")[1] == f"label=com.abserve.check={CHECK_ID}" for c in images for word in c
               if "|" in word), "images are removed by the check's own label only"
    # `compose down` runs on the check's own project, not the GPU host's `abserve`.
    assert {c[1] for c in made if c[0] == "project"} == {PROJECT}
    assert not [c for c in made if c[0] == "compose-engine.sh"]


@pytest.mark.process
def test_teardown_keeps_the_labelled_images_when_told(tmp_path: Path) -> None:
    result, made = run_teardown(tmp_path, ABSERVE_COMPOSE_KEEP_IMAGES="1")
    assert result.returncode == 0, result.stderr
    assert not [c for c in made if c[:2] == ["docker", "image"]]


def test_the_check_images_carry_the_checks_label() -> None:
    text = (ROOT / "scripts" / "compose-images.sh").read_text()
    assert 'LABEL="com.abserve.check=${ABSERVE_CHECK_ID:-manual}"' in text
    assert text.count('--change "LABEL $LABEL"') == 2  # the host runtime and the Debian base
    assert '--label "$LABEL"' in text  # the Dockerfile builds and their smoke runs
    check = (ROOT / "scripts" / "compose-check.sh").read_text()
    for word in ("prune", "system prune"):
        assert word not in "\n".join(ln for ln in check.splitlines() if not ln.lstrip().startswith("#"))


def run_engine_start(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    repo = tree(tmp_path)
    log = tmp_path / "calls.jsonl"
    base = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "FAKE_LOG": str(log),
            "HOME": str(tmp_path), "ABSERVE_DOCKER_ROOT": str(tmp_path / "engine"), "FAKE_INFO_RC": "0"}
    result = subprocess.run(["bash", str(repo / "scripts" / "compose-engine.sh"), "start"], cwd=repo,
                            env=base | env, capture_output=True, text=True, timeout=60, check=False)
    return result, calls(log)


@pytest.mark.process
def test_an_engine_the_script_did_not_start_is_refused_with_one_line(tmp_path: Path) -> None:
    result, made = run_engine_start(tmp_path)
    assert result.returncode == 4
    (line,) = result.stderr.strip().splitlines()
    assert "refusing" in line
    assert "ABSERVE_COMPOSE_USE_ENGINE=1" in line
    assert not [c for c in made if c[0] in {"dockerd", "apt-get"}]


@pytest.mark.process
def test_an_engine_the_script_did_not_start_is_used_when_told(tmp_path: Path) -> None:
    result, made = run_engine_start(tmp_path, ABSERVE_COMPOSE_USE_ENGINE="1")
    assert result.returncode == 0, result.stderr
    assert "ABSERVE_COMPOSE_USE_ENGINE=1" in result.stdout
    assert not [c for c in made if c[0] in {"dockerd", "apt-get"}]


@pytest.mark.process
def test_the_engine_the_script_started_is_used_without_being_told(tmp_path: Path) -> None:
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "dockerd.pid").write_text(f"{os.getpid()}\n")  # a live pid: "ours"
    result, made = run_engine_start(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "our dockerd is running" in result.stdout
    assert not [c for c in made if c[0] == "dockerd"]


@pytest.mark.timeout(60)
@pytest.mark.process
def test_the_check_refuses_a_foreign_engine_before_touching_anything(tmp_path: Path) -> None:
    repo = tree(tmp_path)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "FAKE_LOG": str(log), "HOME": str(tmp_path),
           "ABSERVE_DOCKER_ROOT": str(tmp_path / "engine"), "FAKE_INFO_RC": "0"}
    result = subprocess.run(["bash", str(repo / "scripts" / "compose-check.sh"), "signoff"], cwd=repo,
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "refusing" in result.stderr
    made = calls(log)
    assert {tuple(c) for c in made} == {("docker", "info")}, made  # no teardown, no compose, no rm
