"""``from: accepted`` under docker compose (``abserve.deploy.compose_accepted``): ``python -m
abserve.deploy.compose_env CONFIG`` reads the accepted release from a real SQLite ledger, made
the way a release manager makes one (a compose sign-off stored with the images
``scripts/signoff.sh`` recorded, ``abserve report``, then the ledger's ``accept``), and emits the accepted
arm's recorded image, pinned by its id, as arm a's base image; it refuses (exit 4) a config
whose ledger holds nothing accepted, a sign-off without a shared store, and an accepted build
that ran no image."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, provenance, run_info
from tests.unit.deploy.test_preflight_cli import check, fake_host
from typer.testing import CliRunner

from abserve.cli import app
from abserve.deploy.compose_accepted import resolve_accepted_image
from abserve.deploy.compose_env import compose_env, image_tag, load_experiment, main
from abserve.ledger.baseline import NoAcceptedBuild
from abserve.ledger.book import accept
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
NIGHTLY = Path("configs/nightly-gpu.yaml")  # relative to the checkout, as signoff.sh passes it
POLICY = ROOT / "configs/policy/default.yaml"
IMAGE_ID = "sha256:" + "5e" * 32
RECORDED = f"abserve/vllm-b:vllm-vllm-openai-v0.33.0-1a2b3c4d@{IMAGE_ID}"  # as signoff.sh records it


def compose_signoff(url: str, out: Path, run_id: str, image: str | None, name: str = "v1",
                    base: str | None = "vllm/vllm-openai:v0.33.0") -> None:
    """Run ``run_id`` of config gpu-release stored at ``url`` as a compose sign-off (arm b, from
    the base image ``base`` when configured with one, ran ``image`` when given), reported (its
    ledger entry) and its candidate accepted as ``name``."""
    b = provenance("bisect")
    if image is not None:
        b = b.model_copy(update={"kind": "image", "image": image})
    run = run_info({"a": provenance("bisect"), "b": b}, run_id=run_id, status="running")
    configured = {"a": {"image": "vllm/vllm-openai:v0.32.0", "lookup": "bisect", "role": "baseline"},
                  "b": {"lookup": "bisect", "role": "candidate", "args": {"--max-num-seqs": 16}}
                  | ({"image": base} if base else {})}
    run.provenance = run.provenance.model_copy(
        update={"experiment": "gpu-release", "arm_configs": configured})
    exchanges = [ex.model_copy(update={"run_id": run_id}) for ex in ab_run(70, seed=1, arms=("a", "b"))]
    with Store.open(url) as store:
        store.create_run(run)
        store.write_exchanges(exchanges)
        store.finish_run(run_id, "completed")
    reported = CliRunner().invoke(app, ["report", run_id, "--db", url, "--out", str(out / run_id),
                                        "--policy", str(POLICY)])  # writes the run's ledger entry
    assert reported.exit_code == 0, reported.output
    with Store.open(url) as store:
        accept(store, run_id, name, now=time.time())


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    compose_signoff(url, tmp_path, "signoff-1", RECORDED)
    return url


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # compose_env takes CONFIG relative to the checkout
    monkeypatch.delenv("ABSERVE_DATABASE_URL", raising=False)


def env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


@pytest.mark.process
def test_the_accepted_arm_is_the_recorded_image_pinned_by_its_id(
    ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(NIGHTLY), "--db", ledger]) == 0
    env = env_lines(capsys.readouterr().out)
    assert env["ABSERVE_VLLM_IMAGE_A"] == RECORDED  # what compose builds arm a from
    assert env["ABSERVE_VLLM_TAG_A"] == image_tag(RECORDED)
    assert env["ABSERVE_LOOKUP_A"] == "bisect"  # the accepted arm as it was configured
    assert env["VLLM_ARM_ARGS_A"] == "--max-num-seqs=16"
    assert env["ABSERVE_VLLM_IMAGE_B"] == "vllm/vllm-openai:v0.33.0"  # the build to check
    assert env["ABSERVE_ARMS"] == "a b"


@pytest.mark.process
def test_the_store_may_come_from_the_environment_and_the_latest_release_wins(
    ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = RECORDED.replace("5e" * 32, "7f" * 32)
    compose_signoff(ledger, tmp_path, "signoff-2", newer, name="v2")
    monkeypatch.setenv("ABSERVE_DATABASE_URL", ledger)  # as the stack's containers get it
    assert main([str(NIGHTLY)]) == 0
    assert env_lines(capsys.readouterr().out)["ABSERVE_VLLM_IMAGE_A"] == newer
    resolved = resolve_accepted_image(load_experiment(NIGHTLY), ledger)
    assert resolved.accepted_baseline == {"name": "v2", "run_id": "signoff-2", "arm": "b",
                                          "config_name": "gpu-release"}


@pytest.mark.process
def test_an_image_recorded_without_its_id_is_taken_by_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    compose_signoff(url, tmp_path, "signoff-1", "abserve/vllm-b:t34")  # `docker image inspect` failed
    assert main([str(NIGHTLY), "--db", url]) == 0
    assert env_lines(capsys.readouterr().out)["ABSERVE_VLLM_IMAGE_A"] == "abserve/vllm-b:t34"


@pytest.mark.parametrize("store", ["empty", "missing"])
def test_a_ledger_with_nothing_accepted_is_refused_in_one_line(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    if store == "empty":
        Store.open(url).close()
    assert main([str(NIGHTLY), "--db", url]) == 4
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "no accepted build of config 'gpu-release'" in err
    assert "abserve accept RUN_ID --as NAME" in err
    assert store == "empty" or not (tmp_path / "ledger.db").exists()  # never created by a read


def test_without_a_shared_store_from_accepted_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(NIGHTLY)]) == 4
    err = capsys.readouterr().err
    assert "set ABSERVE_DATABASE_URL" in err
    assert "profile `ledger`" in err


@pytest.mark.process
def test_without_a_recorded_image_the_configured_one_is_taken(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    compose_signoff(url, tmp_path, "signoff-1", None)  # ABSERVE_ARM_IMAGES was not set
    resolved = resolve_accepted_image(load_experiment(NIGHTLY), url)
    assert resolved.arms["a"].image == "vllm/vllm-openai:v0.33.0"  # the base, as configured


@pytest.mark.process
def test_an_accepted_build_that_ran_no_image_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    compose_signoff(url, tmp_path, "signoff-1", None, base=None)  # a build of `abserve run`
    assert main([str(NIGHTLY), "--db", url]) == 4
    err = capsys.readouterr().err
    assert "accepted release 'v1' (run signoff-1) recorded no image" in err


def test_an_unresolved_arm_is_never_rendered() -> None:
    with pytest.raises(ValueError, match="from: accepted is not resolved"):
        compose_env(load_experiment(NIGHTLY), NIGHTLY.as_posix())


def test_a_config_without_from_accepted_reads_no_store() -> None:
    experiment = load_experiment(Path("configs/gpu-release.yaml"))
    assert resolve_accepted_image(experiment, None) is experiment
    with pytest.raises(NoAcceptedBuild):
        resolve_accepted_image(load_experiment(NIGHTLY), "")


@pytest.mark.process
def test_the_gpu_preflight_passes_the_nightly_before_any_store_is_read(tmp_path: Path) -> None:
    fake_host(tmp_path / "bin")  # one H100, the NVIDIA runtime
    code, out, err = check(tmp_path, str(NIGHTLY), "--gpu")
    assert code == 0, out + err
    assert "ok" in out
