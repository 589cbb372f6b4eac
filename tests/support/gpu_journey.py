"""The GPU engineer's journey, run as the pages write it, on this machine's CPU engine.

Every shell block of the GPU journey's pages (``JOURNEY``: docs/gpu.md's own-change recipe,
its run, rotation and placement-bias sections, the GPU part of docs/release-workflow.md) is
read from the Markdown (``tests.support.doc_blocks``) and run with bash, as written, in a
fresh copy of the checkout, in page order. Only the machine is stood in for
(``tests.support.gpu_standin``): ``nvidia-smi`` reporting H100s, ``docker info`` listing the
NVIDIA runtime, ``pipx``, an ``$EDITOR`` that applies the edit the page describes, the CPU
engine's images for the CUDA ones (a compose override outside the user's files) and this
machine's server flags and load (``ABSERVE_CONFIG_OVERLAY``). What each block must leave
behind is asserted (``EXPECT``); a shell block on those pages that ``EXPECT`` does not know
fails the journey, so no documented command can change without this test noticing.

Run by ``scripts/compose-check.sh journey`` (the engine, the CPU runtime image and the tiny
model ready): ``python -m tests.support.gpu_journey WORK``. Exit 0 when every block did what
its page says, else 1 with one line per block that did not.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.doc_blocks import Block, blocks, in_section
from tests.support.gpu_standin import Standin, copy_checkout, make_standin, use_overlay

ROOT = Path(__file__).resolve().parents[2]
# make test's journey (ABSERVE_JOURNEY_QUICK=1): every block whole but the rotation's, which
# runs as written with GPU_ROTATION_DRY_RUN=1 (its plan: the config read by the one reader, the
# ABBA order): four more sign-offs would double the journey's time in CI. `make compose-check`
# runs the rotation whole, and its `rotation` step runs a real one.
QUICK = "ABSERVE_JOURNEY_QUICK"
# The journey's pages and sections, in the order a user walks them, with the stand-in host's
# GPU count and the overlay of this machine each section's sign-offs run under
# (``gpu_standin.OVERLAYS``): the own change and the lookup sign-off on one GPU (the 3B
# configs' three arms share it), rotation and placement bias on two.
JOURNEY: list[tuple[str, str, int, str]] = [
    ("docs/gpu.md", "Your own change (start here)", 1, "decide"),
    ("docs/gpu.md", "Run it", 1, "small"),
    ("docs/gpu.md", "Counterbalancing the GPUs (`scripts/gpu-rotation.sh`)", 2, "small"),
    ("docs/gpu.md", "Measuring the host's placement bias", 2, "decide"),
    ("docs/gpu.md", "One ledger on the host: accept, nightly, ledger", 1, "decide"),
    ("docs/release-workflow.md", "On a GPU host (docker compose)", 1, "decide"),
]


@dataclass
class Ran:
    """What one block did: its output, the runs it made (new folders under runs/), its time."""

    block: Block
    output: str
    runs: list[str]
    seconds: float
    codes: list[int] = field(default_factory=list)  # every `echo $?` the block printed


def report(checkout: Path, run: str) -> dict[str, object]:
    path = checkout / "runs" / run / "report.json"
    data: dict[str, object] = json.loads(path.read_text()) if path.is_file() else {}
    return data


# What each block must leave behind, by a phrase its text holds (first match wins).
Check = Callable[[Ran, Path], list[str]]


def expect_verdict(codes: set[int], verdicts: set[str]) -> Check:
    """The block's sign-off ran to one of ``verdicts`` and printed one of ``codes``."""
    def check(ran: Ran, checkout: Path) -> list[str]:
        problems = []
        if ran.codes and ran.codes[-1] not in codes:
            problems.append(f"exit {ran.codes[-1]}, expected one of {sorted(codes)}")
        signed = [r for r in ran.runs if (checkout / "runs" / r / "report.json").is_file()]
        if not signed:
            problems.append(f"no report in any new run folder ({ran.runs or 'none'})")
        for run in signed:
            verdict = str(report(checkout, run).get("verdict", "")).lower()
            if verdict not in verdicts:
                problems.append(f"{run}: verdict {verdict!r}, expected one of {sorted(verdicts)}")
        return problems
    return check


def expect_exit_zero(ran: Ran, checkout: Path) -> list[str]:
    failed = "[journey] status" in ran.output
    return ["a command failed (see its [journey] status line)"] if failed else []




def expect_rotation(ran: Ran, checkout: Path) -> list[str]:
    """The rotation: whole (four sign-offs and their combined report, judged), or under
    ``QUICK`` its plan only: four blocks ABBA over GPUs 0 and 1 and exit 0."""
    if os.environ.get(QUICK) != "1":
        return expect_verdict({0, 1, 2}, JUDGED)(ran, checkout)
    plan = re.findall(r"^block (\d) run \S+ a:gpu(\d) b:gpu(\d)$", ran.output, flags=re.M)
    abba = [("0", "0", "1"), ("1", "1", "0"), ("2", "1", "0"), ("3", "0", "1")]
    return expect_exit_zero(ran, checkout) + ([] if plan == abba else [f"plan {plan}, expected {abba}"])


def expect_release_series(ran: Ran, checkout: Path) -> list[str]:
    """The ledger block: the release passed, was accepted, the nightly against it was judged
    (the same build: pass) and the ledger site was written; no command failed."""
    problems = expect_exit_zero(ran, checkout)
    signed = [r for r in ran.runs if (checkout / "runs" / r / "report.json").is_file()]  # not ledger-site/
    judged = {r: str(report(checkout, r).get("verdict", "")).lower() for r in signed}
    if sorted(judged.values()) != ["pass", "pass"]:
        problems.append(f"expected the release and the nightly to pass, got {judged}")
    if not (checkout / "runs" / "ledger-site" / "index.html").is_file():
        problems.append("no ledger site in runs/ledger-site/")
    return problems


def expect_network(ran: Ran, checkout: Path) -> list[str]:
    """The external-PostgreSQL network block: it ran; the network it made is removed again
    (the compose check leaves the engine as it found it)."""
    subprocess.run(["docker", "network", "rm", "abserve-ledger"], capture_output=True, check=False)
    return expect_exit_zero(ran, checkout)


JUDGED = {"pass", "fail", "inconclusive", "marginal"}
EXPECT: list[tuple[str, Check]] = [
    ("scripts/signoff.sh configs/local/my-change.yaml", expect_verdict({0}, {"pass"})),
    ("scripts/gpu-rotation.sh", expect_rotation),
    # The block measures the host's placement bias: a FAIL of the A/A' is that measurement (a bias
    # beyond the allowance), not a page that does not run. On the CPU stand-in beside CI's load it
    # happens (one fresh-clone run: tpot.hl +4.6 ms [+1.2, +8.0] against 1 ms); on a GPU host the
    # page says it should pass.
    ("scripts/signoff.sh configs/gpu-aa.yaml", expect_verdict({0, 1, 2}, JUDGED)),
    ("scripts/signoff.sh configs/gpu-qwen2.5-vl-3b.yaml", expect_verdict({0, 1, 2}, JUDGED)),
    ("scripts/signoff.sh configs/nightly-gpu.yaml", expect_release_series),
    ("docker network create abserve-ledger", expect_network),
]


def check_for(block: Block) -> Check | None:
    for phrase, check in EXPECT:
        if phrase in block.text:
            return check
    return expect_exit_zero if block.text.strip() else None


def run_block(block: Block, checkout: Path, standin: Standin) -> Ran:
    """``block`` run by bash in the checkout, each failing command's status reported; every
    ``echo $?`` the page wrote is captured as an exit code."""
    before = set(os.listdir(checkout / "runs")) if (checkout / "runs").is_dir() else set()
    script = "trap 'echo \"[journey] status $? of: $BASH_COMMAND\" >&2' ERR\n" + block.text
    started = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(["bash", "-c", script], cwd=checkout, env=standin.env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as shell:
        assert shell.stdout is not None
        for line in shell.stdout:  # shown as it goes: a sign-off takes minutes
            print(f"  | {line}", end="", flush=True)
            lines.append(line)
    output = "".join(lines)
    if shell.returncode != 0:
        output += f"\n[journey] status {shell.returncode} of: the block\n"
    after = set(os.listdir(checkout / "runs")) if (checkout / "runs").is_dir() else set()
    printed = re.findall(r"^(\d+)\s*$", output, flags=re.M)
    codes = [int(code) for code in printed] if "echo $?" in block.text else []
    return Ran(block, output, sorted(after - before), time.monotonic() - started, codes)


def commands(block: Block) -> str:
    """A block's commands without comments and blank lines: two pages showing one series."""
    lines = (re.sub(r"\s+#\s.*$", "", line).strip() for line in block.text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#"))


def journey_blocks(only: str = "") -> list[tuple[Block, int, str]]:
    """The journey's shell blocks, in order; ``only`` (comma-separated phrases of section
    headings, ``ABSERVE_JOURNEY_ONLY`` while developing) keeps those sections alone."""
    found: list[tuple[Block, int, str]] = []
    wanted = [p for p in only.split(",") if p]
    for page, heading, gpus, overlay in JOURNEY:
        if wanted and not any(p in heading for p in wanted):
            continue
        section = [b for b in in_section(blocks(ROOT / page, page), heading) if b.is_shell]
        if not section:
            raise SystemExit(f"gpu journey: {page} has no shell block under {heading!r}: the page changed")
        found += [(block, gpus, overlay) for block in section]
    return found


def main(work: Path) -> int:
    checkout = copy_checkout(ROOT, work / "abserve")
    standin = make_standin(work / "standin", checkout, ROOT)
    problems: list[str] = []
    ran_before: dict[str, Block] = {}
    for block, gpus, overlay in journey_blocks(os.environ.get("ABSERVE_JOURNEY_ONLY", "")):
        same = ran_before.get(commands(block))
        if same is not None:  # one series on two pages: run once, held to the same check
            print(f"[journey] {block.where()}: the commands of {same.where()}, run above", flush=True)
            continue
        ran_before[commands(block)] = block
        use_overlay(standin.folder, overlay)
        standin.env["STANDIN_GPUS"] = str(gpus)
        if os.environ.get(QUICK) == "1" and "gpu-rotation.sh" in block.text:
            standin.env["GPU_ROTATION_DRY_RUN"] = "1"
        else:
            standin.env.pop("GPU_ROTATION_DRY_RUN", None)
        check = check_for(block)
        if check is None:
            problems.append(f"{block.where()}: a block the journey does not know how to check")
            continue
        print(f"[journey] {block.where()}:\n{block.text}", flush=True)
        ran = run_block(block, checkout, standin)
        found = check(ran, checkout)
        print(f"[journey] {block.where()}: {len(ran.runs)} run(s) in {ran.seconds:.0f} s; "
              f"{'ok' if not found else 'FAILED'}", flush=True)
        problems += [f"{block.where()}: {p}" for p in found]
    for line in problems:
        print(f"[journey] FAILED {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]).resolve()))
