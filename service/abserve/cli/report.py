"""``abserve report``, ``abserve plan``, ``abserve watch`` and ``abserve placement-bias``: they
only read the store.

``abserve report RUN_ID --out DIR [--db URL] [--policy FILE] [--baseline RUN_ID]`` writes the
four report files and exits with the verdict's code (0 pass, 1 fail, 2 inconclusive or
marginal, 3 invalid); 4 means the report could not be made (unknown run, unreadable store or
policy). Without ``--db`` the store holding RUN_ID is found under ``--runs`` (``runs/``);
without ``--policy`` the policy the run was judged with is used (``abserve.report.locate``);
the command says which store and policy it used. Under a policy other than the run's own (a
re-judgment) the report is written but the run's ledger row, its sign-off, is kept
(``abserve.ledger.signoff``), and the command says so. ``--summary-md FILE`` also appends the first
screen as Markdown for a CI job (``abserve.report.summary_file``). ``abserve plan RUN_ID`` finds
its store and policy the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes
from abserve.base.units import ms
from abserve.ledger.signoff import build_report
from abserve.report.judging import DEFAULT_POLICY, ReportError, locate, make_plan
from abserve.report.summary_file import LINK_BASE_HELP, SUMMARY_HELP

USAGE_ERROR = exit_codes.USAGE


def report(
    run_id: Annotated[str, typer.Argument(help="The run to judge.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the report files.")],
    db: Annotated[str | None, typer.Option(
        "--db", help="Store URL (default: the SQLite store under --runs that holds RUN_ID).")] = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Another run to show side by side.")
    ] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy YAML (default: the policy the run was judged with).")] = None,
    runs: Annotated[Path, typer.Option("--runs", help="Where to look for the store without --db.")] = Path(
        "runs"),
    summary_md: Annotated[Path | None, typer.Option("--summary-md", help=SUMMARY_HELP)] = None,
    summary_link_base: Annotated[str | None, typer.Option("--summary-link-base", help=LINK_BASE_HELP)] = None,
) -> None:
    """Judge a stored run and write its report.

    Writes report.html, report.md, report.json and junit.xml for RUN_ID into OUT (and, with
    --summary-md, the first screen as Markdown for a CI job); exits with the verdict's code.
    """
    from abserve.report.summary_file import target, write_run

    try:
        summary = target(summary_md, summary_link_base)
        url, chosen, where = locate(run_id, db, policy, runs)
        typer.echo(where)
        paths = build_report(url, run_id, out, DEFAULT_POLICY, baseline, policy=chosen, note=typer.echo)
    except (ReportError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(USAGE_ERROR) from exc
    typer.echo(f"verdict: {paths.verdict} (exit {paths.exit_code})")
    for p in (paths.html, paths.markdown, paths.json, paths.junit):
        typer.echo(f"wrote {p}")
    if summary is not None and paths.judgment is not None:
        typer.echo(f"summary appended to {write_run(summary, paths.judgment, out)}")
    raise typer.Exit(paths.exit_code)


def plan_command(
    run_id: Annotated[str, typer.Argument(help="The pilot run.")],
    db: Annotated[str | None, typer.Option(
        "--db", help="Store URL (default: the SQLite store under --runs that holds RUN_ID).")] = None,
    metric: Annotated[str, typer.Option(help="ttft, tpot, itl or e2e.")] = "tpot",
    effect_ms: Annotated[float | None, typer.Option("--effect-ms", help="Effect to detect, ms.")] = None,
    effect_relative: Annotated[
        float | None,
        typer.Option("--effect-relative", help="Effect as a fraction of the baseline median."),
    ] = None,
    power: Annotated[float, typer.Option(help="Probability of detecting the effect.")] = 0.8,
    mismatch_rate: Annotated[
        float | None, typer.Option("--mismatch-rate", help="Output mismatch rate to catch.")
    ] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy YAML (default: the policy the run was judged with).")] = None,
    runs: Annotated[Path, typer.Option("--runs", help="Where to look for the store without --db.")] = Path(
        "runs"),
) -> None:
    """Estimate how many requests a run needs to detect an effect, from a pilot run's variance."""
    if metric not in ("ttft", "tpot", "itl", "e2e"):
        typer.echo(f"error: unknown metric {metric!r}", err=True)
        raise typer.Exit(USAGE_ERROR)
    try:
        url, chosen, where = locate(run_id, db, policy, runs)
        typer.echo(where)
        p = make_plan(
            url,
            run_id,
            chosen,
            metric=metric,
            effect=None if effect_ms is None else effect_ms / 1000,
            effect_relative=effect_relative,
            power=power,
            mismatch_rate=mismatch_rate,
        )
    except ReportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(USAGE_ERROR) from exc
    typer.echo(
        f"{p.metric}: pilot {p.pilot_pairs} pairs, "
        f"paired spread {ms(p.pilot_sigma, signed=False, places=4)}; "
        f"to detect {ms(p.effect, signed=False, places=4)} at {p.confidence:.0%} confidence with "
        f"{p.power:.0%} power: {p.requests_needed} requests (after warm-up)"
    )
    if p.requests_for_mismatch is not None:
        typer.echo(
            f"to see one output mismatch at rate {p.mismatch_rate} with {p.power:.0%} "
            f"probability: {p.requests_for_mismatch} requests"
        )


def watch(
    run_id: Annotated[str, typer.Argument(help="The run to watch.")],
    db: Annotated[str | None, typer.Option(
        "--db", envvar="ABSERVE_DATABASE_URL", show_envvar=False,
        help="Store URL (default: $ABSERVE_DATABASE_URL, else the SQLite store under --runs that "
             "holds RUN_ID).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy YAML, overriding the one the run recorded (default: the run's, "
                         "else configs/policy/default.yaml).")] = None,
    every: Annotated[float, typer.Option("--every", help="Seconds between refreshes.")] = 10.0,
    once: Annotated[bool, typer.Option("--once", help="Print one plain-text frame and exit.")] = False,
    budget: Annotated[str | None, typer.Option(
        "--budget", help="Show what is left of this budget (10m, 400req, 10m,400req; "
                         "default: the one the run recorded, if any).")] = None,
    wait: Annotated[float, typer.Option(
        "--wait", help="Wait up to this many seconds for the store and the run to appear.")] = 0.0,
    runs: Annotated[Path, typer.Option("--runs", help="Where to look for the store without --db.")] = Path(
        "runs"),
) -> None:
    """Show a run's progress from its store while it runs.

    Per arm: requests, errors and mismatches; the critical gates' current intervals; the time
    left. Exits 0 when the run ends.
    """
    from abserve.runs.watch_report import run_watch

    raise typer.Exit(run_watch(run_id, db, policy, every, once, budget, wait, runs))


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("report")(report)
    app.command("plan")(plan_command)
    app.command("watch")(watch)
    from abserve.report.placement_bias import placement_bias

    app.command("placement-bias")(placement_bias)
