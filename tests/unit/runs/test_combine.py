"""``abserve combine``: the GPU host's rotation merges per-block runs (arms on swapped GPUs)
into one blocked run, so the judgment separates the code's effect from the GPUs' bias."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.support.records_factory import ab_run, provenance, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import judge, load_policy
from abserve.runs.combine import BlockRun, CombineError, combine_runs
from abserve.store import Store

ROTATION = ["a:gpu0,b:gpu1", "a:gpu1,b:gpu0", "a:gpu1,b:gpu0", "a:gpu0,b:gpu1"]  # ABBA
GPU1_PENALTY = 0.004  # seconds of TTFT that GPU 1 costs whichever arm runs there


def block_store(tmp_path: Path, index: int, placement: str, arms: dict | None = None) -> BlockRun:
    """A block's own store and run: no code effect, only the placement's bias on b - a."""
    bias = GPU1_PENALTY if placement.endswith("b:gpu1") else -GPU1_PENALTY
    url = f"sqlite:///{tmp_path / f'block{index}.db'}"
    run_id = f"rot-b{index}"
    store = Store.open(url)
    info = run_info(arms, run_id=run_id)
    store.create_run(info.model_copy(update={"status": "running"}))
    records = ab_run(n=40, ttft_shift=bias, arms=("a", "b"), seed=index)
    store.write_exchanges(
        [r.model_copy(update={"run_id": run_id, "request_id": f"{run_id}-{r.request_id}"}) for r in records]
    )
    store.finish_run(run_id, "completed")
    store.close()
    return BlockRun(database_url=url, run_id=run_id, placement=placement)


def test_combined_rotation_cancels_the_gpu_bias(tmp_path: Path) -> None:
    arms = {"a": provenance("linear"), "b": provenance("bisect")}
    blocks = [block_store(tmp_path, i, p, arms) for i, p in enumerate(ROTATION)]
    target = f"sqlite:///{tmp_path / 'merged.db'}"
    merged = combine_runs(blocks, "rotation", target)
    assert merged.status == "completed"
    assert len(merged.provenance.blocks) == 4
    assert merged.arms["b"].proven_lookup == "bisect"
    assert merged.arms["a"].telemetry.lookup_calls == 4 * arms["a"].telemetry.lookup_calls
    store = Store.open(target)
    exchanges = list(store.iter_exchanges("rotation"))
    run = store.get_run("rotation")
    store.close()
    assert run is not None
    assert len(exchanges) == 160
    assert {e.tags["placement"] for e in exchanges} == set(ROTATION)
    assert {e.tags["block"] for e in exchanges} == {"0", "1", "2", "3"}
    policy = load_policy("configs/policy/default.yaml")
    (ttft,) = [m for m in judge(run, exchanges, policy).metrics if m.metric == "ttft" and m.statistic == "hl"]
    assert ttft.method == "counterbalanced"
    assert ttft.placement_bias is not None
    assert abs(abs(ttft.placement_bias) - GPU1_PENALTY) < 0.0015
    assert ttft.low is not None
    assert ttft.high is not None
    assert ttft.low <= 0.0 <= ttft.high


def test_blocks_that_proved_different_lookups_are_refused(tmp_path: Path) -> None:
    good = block_store(tmp_path, 0, ROTATION[0], {"a": provenance("linear"), "b": provenance("bisect")})
    bad = block_store(tmp_path, 1, ROTATION[1], {"a": provenance("linear"), "b": provenance("bisect", None)})
    with pytest.raises(CombineError, match="proved"):
        combine_runs([good, bad], "rotation", f"sqlite:///{tmp_path / 'merged.db'}")


def test_combine_command_reads_the_rotation_manifest(tmp_path: Path) -> None:
    blocks = [block_store(tmp_path, i, p) for i, p in enumerate(ROTATION[:2])]
    manifest = tmp_path / "blocks.yaml"
    manifest.write_text(yaml.safe_dump([b.model_dump() for b in blocks]))
    db = f"sqlite:///{tmp_path / 'merged.db'}"
    result = CliRunner().invoke(app, ["combine", str(manifest), "--db", db, "--into", "rot"])
    assert result.exit_code == 0, result.output
    assert "2 blocks, status completed" in result.output


@pytest.mark.process
def test_rotation_script_plans_a_balanced_abba_order() -> None:
    import os
    import subprocess

    out = subprocess.run(
        ["scripts/gpu-rotation.sh", "configs/gpu-qwen2.5-vl-3b.yaml", "4", "2", "5"],
        env={**os.environ, "GPU_ROTATION_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert [line.split()[-2:] for line in out] == [
        ["a:gpu2", "b:gpu5"],
        ["a:gpu5", "b:gpu2"],
        ["a:gpu5", "b:gpu2"],
        ["a:gpu2", "b:gpu5"],
    ]
