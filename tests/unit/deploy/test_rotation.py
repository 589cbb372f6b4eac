"""``abserve rotate`` (``scripts/gpu-rotation.sh``): the ABBA plan, the policy the container
judges with, and a whole rotation with ``signoff.sh`` and ``docker`` replaced by recording
fakes (the technique of ``test_compose_scripts``); the real stack runs in ``make compose-check``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.deploy.test_compose_scripts import calls, fake

from abserve.base.packaged import packaged
from abserve.deploy.rotation import RotationRefused, container_policy, plan

ROOT = Path(__file__).resolve().parents[3]
# signoff.sh as a block sees it: records the GPUs it was given, exits with a block's verdict.
SIGNOFF = """
log.close()
with open(os.environ["FAKE_LOG"], "a") as again:
    again.write(json.dumps(["gpus", os.environ["ABSERVE_GPU_A"], os.environ["ABSERVE_GPU_B"],
                            os.environ["ABSERVE_RUN_ID_OVERRIDE"]]) + "\\n")
sys.exit(1)
"""
# docker: `abserve combine` answers FAKE_COMBINE_RC, `abserve report` FAKE_REPORT_RC, the rest 0.
DOCKER = """
a = sys.argv
i = a.index("--entrypoint") if "--entrypoint" in a else -1
command = a[i + 3] if i >= 0 else ""
sys.exit(int(os.environ.get(f"FAKE_{command.upper()}_RC", "0")) if command else 0)
"""


@given(half=st.integers(1, 12), x=st.integers(0, 7), y=st.integers(0, 7))
def test_the_plan_is_abba_and_balanced(half: int, x: int, y: int) -> None:
    if x == y:
        with pytest.raises(RotationRefused, match="swaps two GPUs"):
            plan(2 * half, x, y)
        return
    blocks = plan(2 * half, x, y)
    assert [b.index for b in blocks] == list(range(2 * half))
    for b in blocks:  # the shell's table: swapped when i mod 4 is 1 or 2
        assert (b.gpu_a, b.gpu_b) == ((y, x) if b.index % 4 in (1, 2) else (x, y))
    assert sum(b.gpu_a == x for b in blocks) == half  # each arm on each GPU equally often
    assert blocks[0].placement == f"a:gpu{x},b:gpu{y}"


@pytest.mark.parametrize("blocks", [0, 1, 3, 5])
def test_an_odd_or_empty_plan_is_refused(blocks: int) -> None:
    with pytest.raises(RotationRefused, match="even and at least 2"):
        plan(blocks, 0, 1)


def test_the_container_names_a_checkout_policy_by_its_mount_a_packaged_one_by_name(tmp_path: Path) -> None:
    mine = tmp_path / "configs" / "local" / "p.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text("extends: gpu\n")
    assert container_policy(mine, tmp_path) == "/app/configs/local/p.yaml"
    assert container_policy(packaged("gpu", "policy"), tmp_path) == "gpu"  # an installed abserve's
    assert container_policy(packaged("gpu", "policy"), ROOT) == "/app/configs/policy/gpu.yaml"


def rotation(tmp_path: Path, config: str, *args: str, **env: str) -> tuple[int, str, list[list[str]]]:
    """``scripts/gpu-rotation.sh`` in a checkout of its own, with the real ``abserve rotate``."""
    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "scripts" / "gpu-rotation.sh", tree / "scripts")
    fake(tree / "scripts", "signoff.sh", SIGNOFF)
    (tree / ".env").write_text(f"ABSERVE_RUNS_DIR={tmp_path / 'runs'}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake(bin_dir, "docker", DOCKER)
    if not (bin_dir / "abserve").exists():
        (bin_dir / "abserve").symlink_to(ROOT / ".venv" / "bin" / "abserve")
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    done = subprocess.run(["bash", "scripts/gpu-rotation.sh", config, *args], cwd=tree,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log),
                               "HOME": str(tmp_path), **env},
                          capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stdout + done.stderr, calls(log)


def own_change(tmp_path: Path, policy: str | None = None) -> None:
    """configs/local/x.yaml extending the template; ``policy``: a file of the checkout's there."""
    folder = tmp_path / "repo" / "configs" / "local"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "configs" / "gpu-own-change.yaml", folder.parent / "own.yaml")
    (folder / "x.yaml").write_text("extends: ../own.yaml\nname: x\n")  # no policy: line of its own
    if policy is not None:
        (folder / "p.yaml").write_text("extends: gpu\nname: p\n")
        (folder.parent / "own.yaml").write_text((folder.parent / "own.yaml").read_text()
                                                .replace("policy: gpu ", f"policy: {policy} "))


@pytest.mark.process
def test_a_rotation_runs_each_block_then_combines_and_reports_with_the_configs_policy(tmp_path: Path) -> None:
    own_change(tmp_path, policy="local/p.yaml")  # set by the file x.yaml extends
    code, out, made = rotation(tmp_path, "configs/local/x.yaml", "4", "2", "5", FAKE_REPORT_RC="2")
    assert code == 2, out  # the combined report's code
    blocks = [c[1:3] for c in made if c[0] == "gpus"]
    assert blocks == [["2", "5"], ["5", "2"], ["5", "2"], ["2", "5"]]
    runs = [c for c in made if c[:2] == ["docker", "compose"] and "run" in c]
    assert [c[c.index("--entrypoint") + 3] for c in runs] == ["combine", "report"]
    for call in runs:
        assert call[call.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    report = runs[1]
    assert report[report.index("--policy") + 1] == "/app/configs/local/p.yaml"  # extends: read
    assert any(c[-2:] == ["down", "--remove-orphans"] for c in made)
    name = report[report.index("report") + 1]
    manifest = yaml.safe_load((tmp_path / "runs" / name / "blocks.yaml").read_text())
    assert manifest[1] == {"database_url": f"sqlite:////runs/{name}-b1/abserve.db", "run_id": f"{name}-b1",
                           "placement": "a:gpu5,b:gpu2"}
    assert [c[3] for c in made if c[0] == "gpus"] == [f"{name}-b{i}" for i in range(4)]
    assert out.splitlines()[-1] == f"gpu-rotation: combined report in {tmp_path}/runs/{name} (exit 2)"


@pytest.mark.process
def test_a_packaged_policy_is_named_and_a_failed_combine_is_invalid_with_no_report(tmp_path: Path) -> None:
    own_change(tmp_path)
    code, out, made = rotation(tmp_path, "configs/local/x.yaml", "2", FAKE_COMBINE_RC="1")
    assert code == 3, out
    assert "no combined report: abserve combine exited 1" in out
    assert "combined report in" not in out
    assert not any("report" in c for c in made if c[:2] == ["docker", "compose"])
    assert any(c[-2:] == ["down", "--remove-orphans"] for c in made)


@pytest.mark.process
def test_a_dry_run_prints_the_plan_and_refusals_exit_4(tmp_path: Path) -> None:
    own_change(tmp_path)
    code, out, made = rotation(tmp_path, "configs/local/x.yaml", "2", "0", "1", GPU_ROTATION_DRY_RUN="1")
    assert code == 0, out
    assert [line.split()[-2:] for line in out.splitlines()] == [["a:gpu0", "b:gpu1"], ["a:gpu1", "b:gpu0"]]
    assert made == []
    code, out, _ = rotation(tmp_path, "configs/local/x.yaml", "3")
    assert code == 4
    assert "gpu-rotation refused: BLOCKS must be even" in out
    (tmp_path / "repo" / "configs" / "bad.yaml").write_text("extends: local/x.yaml\narms: {b: {cpus: [1]}}\n")
    code, out, made = rotation(tmp_path, "configs/bad.yaml")
    assert code == 4
    assert "cpus: cannot apply under docker compose" in out
    assert made == []  # refused before any block
