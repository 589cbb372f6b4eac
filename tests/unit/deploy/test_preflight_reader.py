"""One reader of a GPU config on every host path (issue 57): ``abserve check CONFIG --gpu`` (run by
``scripts/signoff.sh``), ``python -m abserve.deploy.compose_env`` and ``abserve check`` read it
with ``abserve.config.load_experiment`` (``extends:``, packaged names, the policy resolved).

The recipe of docs/gpu.md, "Your own change", as a user runs it: the template in place and a
copy under ``configs/local/`` pass the preflight on a simulated H100 (the fakes of
``test_preflight_cli``: ``nvidia-smi`` and ``docker`` on a PATH of their own) with no edit but
the arms' images, and ``compose_env`` derives their environment. Shipped GPU configs leave
``router.arms`` out, so one more candidate arm is one line under ``arms:``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.unit.deploy.test_preflight_cli import ENV, RUNTIMES, check, fake_host, script

from abserve.config import load_experiment as load_any
from abserve.deploy.compose_env import load_experiment, main

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = "configs/gpu-own-change.yaml"
MY_CHANGE = "configs/local/my-change.yaml"
# The config of four lines of issue 57: the 3B sign-off with one more candidate arm.
FOUR_LINES = """extends: {extends}
name: three-candidates
arms:
  c: {{lookup: hybrid, role: candidate}}
"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with the sign-off script, the template (no other config: the template's
    ``extends:`` and ``policy:`` are packaged names) and the host's .env; the current directory."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "configs").mkdir()
    shutil.copy(ROOT / "scripts" / "signoff.sh", root / "scripts" / "signoff.sh")
    shutil.copy(ROOT / TEMPLATE, root / TEMPLATE)
    (root / ".env").write_text(ENV)
    venv_bin = root / ".venv" / "bin"  # signoff.sh finds the checkout's abserve: the real one
    venv_bin.mkdir(parents=True)
    (venv_bin / "abserve").symlink_to(ROOT / ".venv" / "bin" / "abserve")
    monkeypatch.chdir(root)
    return root


def copy_template(root: Path, a: str = "registry.example/vllm:baseline",
                  b: str = "registry.example/vllm:candidate") -> Path:
    """The recipe's copy, with its documented edit: arms.a.image and arms.b.image set."""
    raw = (root / TEMPLATE).read_text()
    edited = raw.replace('"vllm/vllm-openai:v0.32.0"', f'"{a}"')
    edited = edited.replace('"vllm/vllm-openai:v0.33.0"', f'"{b}"')
    assert (edited.count(a), edited.count(b)) == (1, 1), "the template's two images moved"
    path = root / MY_CHANGE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(edited)
    return path


def signoff(root: Path, config: str) -> tuple[int, str]:
    """signoff.sh on a simulated H100; docker answers only `info`, so the run stops at the next
    step (``docker compose version``) with 4 once the preflight has passed."""
    bin_dir = root.parent / "bin"
    fake_host(bin_dir)
    script(bin_dir / "docker", '[ "$*" = "info --format {{json .Runtimes}}" ] || exit 1\n'
           f"printf '%s\\n' '{RUNTIMES}'\n")
    done = subprocess.run(["bash", "scripts/signoff.sh", config], cwd=root, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(root.parent)})
    return done.returncode, done.stdout + done.stderr


@pytest.mark.process
@pytest.mark.parametrize("config", [TEMPLATE, MY_CHANGE])
def test_the_template_in_place_and_its_copy_pass_the_preflight_and_compose_env(
    tree: Path, config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_template(tree)
    rc, out = signoff(tree, config)
    assert "gpu preflight: ok" in out, out
    assert "revision 66285546d2b821cf421d4f5eb2576359d3770cd3 (pinned)" in out  # a release: pinned
    assert "docker compose (v2) is required" in out  # the step after the preflight
    assert rc == 4
    assert main([config]) == 0
    env = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines()[1:])
    assert env["ABSERVE_CONFIG"] == config
    assert env["ABSERVE_MODEL"] == "Qwen/Qwen2.5-VL-3B-Instruct"  # from the packaged 3B config
    assert env["ABSERVE_ARMS"] == "a b"
    assert env["ABSERVE_LOOKUP_A"] == env["ABSERVE_LOOKUP_B"] == ""  # vLLM untouched
    images = (env["ABSERVE_VLLM_IMAGE_A"], env["ABSERVE_VLLM_IMAGE_B"])
    assert images == (("vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.33.0") if config == TEMPLATE
                      else ("registry.example/vllm:baseline", "registry.example/vllm:candidate"))


@pytest.mark.process
def test_the_preflight_reads_the_config_as_compose_env_and_check_do(tree: Path) -> None:
    copy_template(tree)
    fake_host(tree.parent / "bin")
    composed, checked = load_experiment(Path(MY_CHANGE)), load_any(MY_CHANGE)
    assert composed.model_dump() == checked.model_dump()  # abserve check's reader
    code, out, err = check(tree.parent, MY_CHANGE, "--gpu")
    assert code == 0, err
    assert out.endswith("gpu preflight: ok\n")


@pytest.mark.process
def test_a_policy_outside_the_mounted_folders_is_refused_a_packaged_one_is_not(tree: Path) -> None:
    mine = copy_template(tree)
    fake_host(tree.parent / "bin")
    (tree / "elsewhere").mkdir()
    (tree / "elsewhere" / "p.yaml").write_text((ROOT / "configs/policy/gpu.yaml").read_text())
    for policy in ("../../elsewhere/p.yaml", str(tree / "elsewhere" / "p.yaml")):
        mine.write_text(mine.read_text().replace("policy: gpu ", f"policy: {policy} ") + "\n")
        code, _, err = check(tree.parent, MY_CHANGE, "--gpu")
        assert code == 4
        assert err.count("\n") == 1
        assert "is outside the folders docker compose mounts" in err
        with pytest.raises(ValueError, match="outside the folders docker compose mounts"):
            load_experiment(Path(MY_CHANGE))
        mine = copy_template(tree)
    (tree / "configs/local/p.yaml").write_text("extends: gpu\nname: mine\n")  # inside: fine
    mine.write_text(mine.read_text().replace("policy: gpu ", "policy: p.yaml "))
    assert load_experiment(Path(MY_CHANGE)).policy == Path(MY_CHANGE).parent / "p.yaml"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("gpu-*.yaml")), ids=lambda p: p.name)
def test_shipped_gpu_configs_leave_router_arms_out(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    assert (raw.get("router") or {}).get("arms") is None, f"{path.name}: router.arms is derived from arms:"


@pytest.mark.parametrize("extends", ["gpu-qwen2.5-vl-3b.yaml", "configs/gpu-qwen2.5-vl-3b.yaml",
                                     "../gpu-qwen2.5-vl-3b.yaml"])
def test_one_more_candidate_arm_is_one_line_under_arms(tree: Path, extends: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(ROOT / "configs/gpu-qwen2.5-vl-3b.yaml", tree / "configs")
    (tree / "configs/local").mkdir()
    (tree / "configs/local/three.yaml").write_text(FOUR_LINES.format(extends=extends))
    assert len(FOUR_LINES.splitlines()) == 4
    experiment = load_experiment(Path("configs/local/three.yaml"))
    assert list(experiment.arms) == ["a", "b", "a2", "c"]
    assert "arms" not in experiment.router  # derived: http://vllm-<arm>:8000
    assert main(["configs/local/three.yaml"]) == 0
    out = capsys.readouterr().out
    assert "ABSERVE_ARMS=a b a2 c\n" in out
    assert "ABSERVE_LOOKUP_C=hybrid\n" in out


@pytest.mark.process
def test_a_config_extending_a_file_outside_the_mounted_folders_is_refused(tree: Path) -> None:
    fake_host(tree.parent / "bin")
    (tree / "elsewhere").mkdir()
    shutil.copy(tree / TEMPLATE, tree / "elsewhere" / "base.yaml")
    (tree / "configs/local").mkdir()
    (tree / MY_CHANGE).write_text("extends: ../../elsewhere/base.yaml\nname: mine\n")
    with pytest.raises(ValueError, match=r"extends .*elsewhere/base\.yaml, which is outside the folders"):
        load_experiment(Path(MY_CHANGE))
    code, _, err = check(tree.parent, MY_CHANGE, "--gpu")
    assert code == 4
    assert "which is outside the folders docker compose mounts" in err
    (tree / MY_CHANGE).write_text("extends: ../gpu-own-change.yaml\nname: mine\n")  # configs/: mounted
    assert load_experiment(Path(MY_CHANGE)).name == "mine"
