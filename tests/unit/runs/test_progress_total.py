"""The progress bar's total is the requests the run sends: known at the start for a fixed plan,
grown block by block for a sequential one, so ``make run``'s bar never ends past it ("64/58")."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console

from abserve.config import load_experiment
from abserve.runs.progress import LiveProgress
from abserve.runs.rounds import block_requests, round_requests

ROOT = Path(__file__).resolve().parents[3]


def test_blocks_send_the_profiles_requests() -> None:
    config = load_experiment(ROOT / "configs/cpu-default.yaml")  # 24 + 24 requests in 8 blocks
    assert [block_requests(config, i) for i in range(8)] == [6] * 8
    assert sum(block_requests(config, i) for i in range(config.blocks.count)) == sum(
        item.requests for item in config.load.profiles)
    assert block_requests(config, 0) == round_requests(config)


def test_a_sequential_runs_total_grows_with_each_block() -> None:
    config = load_experiment(ROOT / "configs/cpu-default.yaml")
    console = Console(file=StringIO(), width=100)
    warmup = config.blocks.warmup_requests
    progress = LiveProgress("http://127.0.0.1:9", "k" * 24, ["a", "b"], warmup, console)
    for index in range(9):  # the run that ended at "64/58": warm-up and nine rounds of six
        progress.expect(block_requests(config, index))
    assert progress.bar.tasks[0].total == 64
    progress.bar.update(progress.task, completed=64)
    console.print(progress.bar)
    assert "64/64" in console.file.getvalue()  # type: ignore[attr-defined]
