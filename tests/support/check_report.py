"""What a compose sign-off must have produced, checked from its ``report.json``.

``scripts/compose-check.sh`` runs the GPU host's stack on a CPU machine and then asks this
module whether the run went through every piece: the report exists and its verdict matches
the exit code ``scripts/signoff.sh`` returned, the run completed, each arm *proved* the lookup
it was meant to run (abserve's plugin counted it inside the worker's gather step) or, without
one, was identified by what its server ran, the run stopped decided (``--decided``), every
request reached both arms and none of them failed, outputs were compared and none differed
(under concurrent load, ``batch_noise``: every exchange was comparable), and (for a rotation)
the blocks and placements are there. Pure checks over the parsed JSON;
``main`` is the thin CLI: ``python -m tests.support.check_report REPORT_DIR [options]``, run
from the checkout's root. Test assertion code, so it lives with the tests and not in the
shipped package.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from abserve.base import module_cli
from abserve.compare.model import EXIT_CODES


def check(report: dict[str, Any], exit_code: int, expect: dict[str, str], *,
          min_exchanges: int = 1, blocks: int | None = None, batch_noise: bool = False,
          decided: bool = False) -> list[str]:
    """Every way ``report`` falls short of a sound sign-off that exited with ``exit_code``.

    ``expect``: each arm's lookup, or ``identified`` for an arm without one (proven by what its
    server said it ran). ``decided``: the run must have stopped because every critical gate was
    decided, before its budget was spent.

    ``batch_noise``: the load was concurrent, so requests were batched differently on the two
    arms and vLLM's CPU kernels (not batch-invariant) may move logprobs or even tokens; only an
    incomparable exchange is then an equality problem."""
    problems: list[str] = []
    verdict = report.get("verdict")
    if EXIT_CODES.get(str(verdict)) != exit_code or report.get("exit_code") != exit_code:
        problems.append(f"verdict {verdict!r} (report exit {report.get('exit_code')}) "
                        f"does not match the sign-off's exit code {exit_code}")
    if verdict == "invalid":
        problems.append(f"invalid run: {report.get('invalid_reasons')}")
    if report.get("run_status") != "completed":
        problems.append(f"run status {report.get('run_status')!r}, expected 'completed'")
    if int(report.get("exchanges_total", 0)) < min_exchanges:
        problems.append(f"{report.get('exchanges_total')} exchanges, expected at least {min_exchanges}")
    arms = report.get("arms", {})
    for arm, mode in expect.items():
        summary = arms.get(arm)
        if summary is None:
            problems.append(f"arm {arm!r} is missing from the report")
            continue
        detail = str(summary.get("proof_detail", ""))
        if mode == "identified":
            if summary.get("proven_lookup") is not None or not detail.startswith("identified"):
                problems.append(f"arm {arm!r} is not identified by what its server ran: {detail}")
        elif summary.get("proven_lookup") != mode:
            problems.append(f"arm {arm!r} proved {summary.get('proven_lookup')!r}, expected {mode!r}: "
                            f"{summary.get('proof_detail')}")
        if summary.get("error_rate", 0) > 0:
            problems.append(f"arm {arm!r} failed requests: {summary.get('errors')}")
    problems += _equality_problems(report, batch_noise)
    summary = report.get("summary") or {}
    if decided and summary.get("decided") is not True:
        problems.append(f"the run did not stop decided: {summary.get('stop_reason')!r}")
    if blocks is not None:
        problems += _block_problems(report, blocks)
    return problems


def check_invalid(report: dict[str, Any], exit_code: int, because: str, *,
                  min_exchanges: int = 1) -> list[str]:
    """A fault case: the run must be invalid, exit 3, for a reason containing ``because``,
    with the run ended (completed, or interrupted: the orchestrator stops a run whose arm died)
    and at least ``min_exchanges`` stored (nothing acknowledged lost)."""
    problems: list[str] = []
    reasons = [str(r) for r in report.get("invalid_reasons") or []]
    if report.get("verdict") != "invalid" or exit_code != EXIT_CODES["invalid"]:
        problems.append(f"verdict {report.get('verdict')!r} (exit {exit_code}), expected invalid (exit 3)")
    if not any(because in reason for reason in reasons):
        problems.append(f"no invalid reason mentions {because!r}: {reasons}")
    if report.get("run_status") not in ("completed", "interrupted"):
        problems.append(f"run status {report.get('run_status')!r}, expected it ended")
    if int(report.get("exchanges_total", 0)) < min_exchanges:
        problems.append(f"{report.get('exchanges_total')} exchanges stored, {min_exchanges} were "
                        f"acknowledged before the fault")
    return problems


def _equality_problems(report: dict[str, Any], batch_noise: bool = False) -> list[str]:
    lines = report.get("equality") or []
    if not lines:
        return ["no equality line: the arms' outputs were not compared"]
    out = []
    for line in lines:
        pair = f"{line.get('left')} vs {line.get('right')}"
        summary = line.get("summary", {})
        if not line.get("comparable"):
            out.append(f"{pair}: no comparable exchange")
        if batch_noise and summary.get("counts", {}).get("incomparable"):
            out.append(f"{pair}: {summary['counts']['incomparable']} incomparable exchanges")
        elif not batch_noise and summary.get("mismatches"):
            out.append(f"{pair}: {summary['mismatches']} mismatches {summary.get('counts')}")
    return out


def _block_problems(report: dict[str, Any], blocks: int) -> list[str]:
    recorded = report.get("provenance", {}).get("blocks") or []
    placements = {str(b.get("placement_label") or json.dumps(b.get("placement"), sort_keys=True))
                  for b in recorded if isinstance(b, dict)}
    out = []
    if len(recorded) != blocks:
        out.append(f"{len(recorded)} blocks in the provenance, expected {blocks}")
    if blocks >= 2 and len(placements) < 2:
        out.append(f"the blocks ran in one placement only: {sorted(placements)}")
    return out


def _expectations(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        arm, sep, mode = item.partition("=")
        if not sep or not arm or not mode:
            raise ValueError(f"--expect takes ARM=MODE, got {item!r}")
        out[arm] = mode
    return out


app = module_cli.app_of()


@dataclass(frozen=True)
class Asked:
    """What the check was asked to find (its options)."""

    exit_code: int
    expect: list[str]
    decided: bool
    min_exchanges: int
    blocks: int | None
    batch_noise: bool
    invalid_because: str | None


@app.command()
def check_dir(
    report_dir: Annotated[Path, typer.Argument()],
    exit_code: Annotated[int, typer.Option(help="what scripts/signoff.sh returned")],
    expect: Annotated[list[str] | None, typer.Option(
        help="ARM=MODE, e.g. b=bisect, or ARM=identified (an arm without a lookup)")] = None,
    decided: Annotated[bool, typer.Option(
        "--decided", help="the run must have stopped decided, before its budget was spent")] = False,
    min_exchanges: Annotated[int, typer.Option()] = 1,
    blocks: Annotated[int | None, typer.Option(help="a rotation: its number of blocks")] = None,
    batch_noise: Annotated[bool, typer.Option(
        "--batch-noise", help="concurrent load: outputs may differ by batch noise; only "
                              "incomparable exchanges count against equality")] = False,
    invalid_because: Annotated[str | None, typer.Option(
        help="a fault case: expect an invalid run with a reason containing this")] = None,
) -> None:
    """Exit 0 when the report in REPORT_DIR passes every check, 1 (with each problem) if not."""
    asked = Asked(exit_code, expect or [], decided, min_exchanges, blocks, batch_noise, invalid_because)
    if _problems(report_dir / "report.json", asked):
        raise typer.Exit(1)


def _problems(path: Path, asked: Asked) -> list[str]:
    """Check the report at ``path``; print each problem, or one line saying what passed."""
    try:
        report = json.loads(path.read_text())
        if asked.invalid_because is not None:
            problems = check_invalid(report, asked.exit_code, asked.invalid_because,
                                     min_exchanges=asked.min_exchanges)
        else:
            problems = check(report, asked.exit_code, _expectations(asked.expect),
                             min_exchanges=asked.min_exchanges, blocks=asked.blocks,
                             batch_noise=asked.batch_noise, decided=asked.decided)
    except (OSError, ValueError) as exc:
        problems = [str(exc)]
    for problem in problems:
        print(f"check_report: {path}: {problem}", file=sys.stderr)
    if not problems and asked.invalid_because is not None:
        print(f"check_report: {path}: invalid (exit 3) as expected, {report['exchanges_total']} "
              f"exchanges: {report['invalid_reasons']}")
    elif not problems:
        arms = report.get("arms", {})
        proofs = ", ".join(f"{a}={arms[a]['proven_lookup'] or 'identified'}" for a in sorted(arms))
        print(f"check_report: {path}: {report['verdict']} (exit {asked.exit_code}), "
              f"{report['exchanges_total']} exchanges, proven {proofs}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the report in REPORT_DIR passes every check, 1 (with each problem) if not."""
    return module_cli.run(app, argv, "python -m tests.support.check_report")


if __name__ == "__main__":
    raise SystemExit(main())
