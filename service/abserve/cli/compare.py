"""``abserve compare``: judge saved benchmark runs of other tools, unpaired, with the usual report.

``abserve compare --baseline SOURCE [--baseline SOURCE ...] --candidate SOURCE [--candidate
SOURCE ...] --out DIR [--policy P] [--db URL]``: each SOURCE a saved run (a file, or RUN_ID:ARM
of a stored abserve run, read from ``--db``); writes report.html, report.md, report.json and
junit.xml into DIR and exits with the verdict's code (0 pass, 1 fail, 2 inconclusive or
marginal, 3 invalid); 4 with one line naming the file and why when a source is refused (unknown,
truncated, no per-request data, another model than the other sides) or the policy does not load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes


def compare(
    baseline: Annotated[list[str], typer.Option(
        "--baseline", metavar="SOURCE", help="A saved run of the baseline build (repeat for more runs).")],
    candidate: Annotated[list[str], typer.Option(
        "--candidate", metavar="SOURCE", help="A saved run of the candidate build (repeat for more runs).")],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Directory for the report files.")],
    policy: Annotated[str, typer.Option(
        "--policy", help="Policy YAML or packaged name (default: default).")] = "default",
    db: Annotated[str | None, typer.Option(
        "--db", envvar="ABSERVE_DATABASE_URL", show_envvar=False,
        help="Store URL for RUN_ID:ARM sources.")] = None,
) -> None:
    """Judge saved runs of vllm bench serve, AIPerf or GuideLLM, unpaired.

    Each SOURCE is a saved run's file (or RUN_ID:ARM of a stored abserve run). An unpaired
    judgment is weaker than a paired abserve run and honest about run-to-run noise
    (docs/comparing-saved-runs.md).
    """
    from abserve.compare.policy import PolicyError, load_policy
    from abserve.report import write_report
    from abserve.saved.collect import read_sides
    from abserve.saved.judge import judge_sides
    from abserve.saved.model import SavedRunError

    try:
        chosen = load_policy(policy)
        sides = read_sides(baseline, candidate, db)
    except (PolicyError, SavedRunError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    judgment = judge_sides(sides, chosen)
    paths = write_report(judgment, out)
    typer.echo(f"{judgment.verdict.upper()}: {'; '.join(judgment.reasons)}")
    typer.echo(f"report: {paths.html}")
    raise typer.Exit(paths.exit_code)


def register(app: typer.Typer) -> None:
    """Attach ``abserve compare`` to the root CLI."""
    app.command("compare")(compare)
