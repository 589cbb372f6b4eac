"""``abserve placement-bias RUN_ID [--db URL] [--policy FILE]``: the bias to put in the policy.

Reads a stored A/A' run (two arms of the same build, e.g. ``configs/gpu-aa.yaml`` on a GPU host),
judges it under the policy it was judged with (or ``--policy``), and prints per ``hl`` latency
metric the paired shift, its interval and the bias it implies, then the YAML to paste into the
policy (``sequential.unknown_placement_bias``). What the bias is and why: the pure core,
``abserve.compare.placement_bias``. The store and the policy are found as ``abserve report``
finds them (``abserve.report.locate``). Exit 0 with the snippet printed; 4, with one line, when
the run cannot give a bias (not two arms, not the same build, arms rotated, too few pairs) or the
store, run or policy cannot be read. Reads the store only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from abserve.base import exit_codes
from abserve.base.units import ms

if TYPE_CHECKING:  # heavy: imported when the command runs, not when the CLI starts
    from abserve.compare import Judgment, Policy
    from abserve.compare.placement_bias import BiasRow


@dataclass(frozen=True)
class Measured:
    """An A/A' run judged for its placement bias."""

    judgment: Judgment
    policy: Policy
    rows: list[BiasRow]


def measure(url: str, run_id: str, policy: Policy) -> Measured:
    """Judge ``run_id``'s baseline against its other arm under ``policy``; the bias per metric."""
    from abserve.compare.placement_bias import aa_roles, bias_rows, judging_policy, same_build
    from abserve.report.judging import ReportError, judge_run, open_store

    with open_store(url) as store:
        run = store.get_run(run_id)
        if run is None:
            raise ReportError(f"no run {run_id!r} in the store")
        first = next(iter(store.iter_raw_exchanges(run_id)), None)
        roles = aa_roles(run, first.arms if first is not None else ())
        same_build(run, roles)
        judging = judging_policy(policy, roles)
        judgment = judge_run(store, run_id, judging)
    return Measured(judgment, judging, bias_rows(judgment, judging))


def _table(rows: list[BiasRow], baseline: str, other: str) -> list[str]:
    out = [f"{'metric':<7}{'pairs':>7}  {f'shift ({other} - {baseline})':<16}{'interval':<26}bias"]
    for r in rows:
        span = f"[{ms(r.low)}, {ms(r.high)}]"
        bias = ms(r.bias, signed=False) if r.bias is not None else "too few pairs or unbounded"
        out.append(f"{r.metric:<7}{r.pairs:>7}  {ms(r.estimate):<16}{span:<26}{bias}")
    return out


def render(m: Measured) -> list[str]:
    """What the command prints after the store line: the run, the table, the snippet."""
    from abserve.compare.placement_bias import snippet

    j, roles = m.judgment, m.policy.arms
    kind = "anytime-valid" if j.sequential else "fixed-sample"
    lines = [f"A/A' run {j.run_id}: arm {roles.candidate} against baseline {roles.baseline}, "
             f"{j.exchanges_judged} exchanges judged after a warm-up of {j.exchanges_warmup}; "
             f"{m.policy.confidence:.0%} {kind} intervals; bias = the larger absolute bound"]
    lines += _table(m.rows, roles.baseline, roles.candidate or "")
    lines += ["Paste into the policy (as is into a policy that extends gpu.yaml; in gpu.yaml itself, "
              "put unknown_placement_bias under its sequential: block):", snippet(m.rows)]
    if m.policy.mode != "sequential":
        lines.append(f"note: policy {m.policy.name!r} judges with mode: {m.policy.mode}, which does not use "
                     "unknown_placement_bias (mode: sequential does)")
    return lines


def placement_bias(
    run_id: Annotated[str, typer.Argument(help="The A/A' run (two arms, same build).")],
    db: Annotated[str | None, typer.Option(
        "--db", help="Store URL (default: the SQLite store under --runs that holds RUN_ID).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy YAML (default: the policy the run was judged with).")] = None,
    runs: Annotated[Path, typer.Option("--runs", help="Where to look for the store without --db.")] = Path(
        "runs"),
) -> None:
    """Print the placement bias an A/A' run measured, per latency metric.

    Also prints the policy's sequential.unknown_placement_bias to paste (docs/gpu.md,
    "Measuring the host's placement bias").
    """
    from abserve.compare.placement_bias import BiasRefused
    from abserve.report.judging import ReportError, locate

    try:
        url, chosen, where = locate(run_id, db, policy, runs)
        typer.echo(where)
        measured = measure(url, run_id, chosen)
    except (ReportError, BiasRefused) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    for line in render(measured):
        typer.echo(line)
