"""CLI commands of the judgment: ``abserve report``, ``abserve plan``, ``abserve watch`` and
``abserve placement-bias`` (``abserve.report.placement_bias``); they only read the store.

``abserve report RUN_ID --out DIR [--db URL] [--policy FILE] [--baseline RUN_ID]`` writes the
four report files and exits with the verdict's code (0 pass, 1 fail, 2 inconclusive or
marginal, 3 invalid); 4 means the report could not be made (unknown run, unreadable store or
policy). Without ``--db`` the store holding RUN_ID is found under ``--runs`` (``runs/``);
without ``--policy`` the policy the run was judged with is used (``abserve.report.locate``);
the command says which store and policy it used. ``--summary-md FILE`` also appends the first
screen as Markdown for a CI job (``abserve.report.summary_file``). ``abserve plan RUN_ID`` finds
its store and policy the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from abserve import exit_codes
from abserve.report.summary_file import LINK_BASE_HELP, SUMMARY_HELP
from abserve.units import ms

if TYPE_CHECKING:
    from abserve.compare import Judgment, Policy
    from abserve.compare.plan import Plan
    from abserve.records import Exchange
    from abserve.report import ReportPaths
    from abserve.store import Store

USAGE_ERROR = exit_codes.USAGE
DEFAULT_POLICY = Path("configs/policy/default.yaml")



class ReportError(RuntimeError):
    """The report cannot be made: unknown run, missing store or bad policy."""


def open_store(url: str) -> Store:
    """Open an existing store; a SQLite file that does not exist is an error, not a new store."""
    from abserve.store import Store

    if url.startswith("sqlite:///") and not url.endswith(":memory:"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            raise ReportError(f"no store at {path}")
    return Store.open(url)


def _policy(path: Path) -> Policy:
    from abserve.compare import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        raise ReportError(str(exc)) from exc


def judge_run(store: Store, run_id: str, policy: Policy) -> Judgment:
    """Read one run and its exchanges from the store and judge them."""
    return judge_with_evidence(store, run_id, policy)[0]


def judge_with_evidence(store: Store, run_id: str, policy: Policy) -> tuple[Judgment, dict[str, Exchange]]:
    """Judge one run; also return the exchanges the report shows side by side (its mismatches)."""
    from abserve.compare.digest import Digester
    from abserve.compare.judge import judge_digest
    from abserve.report.evidence import wanted

    run = store.get_run(run_id)
    if run is None:
        raise ReportError(f"no run {run_id!r} in the store")
    digest = Digester(policy)  # page by page: only digests and the shown mismatches are kept
    digest.feed_raw(store.iter_raw_exchanges(run_id))
    judgment = judge_digest(run, digest, policy)
    return judgment, digest.evidence(wanted(judgment))


def build_report(
    db: str, run_id: str, out: Path, policy_path: Path, baseline_id: str | None = None,
    policy: Policy | None = None,
) -> ReportPaths:
    """Judge ``run_id`` (and ``baseline_id``) from the store at ``db`` and write the report
    (under ``policy`` when given, else the one read from ``policy_path``)."""
    from abserve.ledger.book import record_signoff
    from abserve.report import write_report

    policy = policy or _policy(policy_path)
    with open_store(db) as store:
        judgment, evidence = judge_with_evidence(store, run_id, policy)
        baseline = judge_run(store, baseline_id, policy) if baseline_id else None
    judgment.provenance["judged_by"] = judged_by()
    paths = write_report(judgment, out, baseline=baseline, exchanges=evidence)
    record_signoff(db, judgment, out)  # the run's ledger entry; never fails the report
    return paths


def store_location(run_id: str, db: str | None, runs: Path) -> tuple[str, Path | None, str]:
    """The store URL, its SQLite file when it is one, and the "store:" line (no password)."""
    from abserve.report.locate import LocateError, find_store
    from abserve.store.urls import shown_url

    try:
        path = find_store(run_id, runs) if db is None else None
    except LocateError as exc:
        raise ReportError(str(exc)) from exc
    url = db or f"sqlite:///{path}"
    where = f"store: {shown_url(url) if db else path}"
    if path is None and url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
    return url, path, where


def locate(run_id: str, db: str | None, policy: Path | None, runs: Path) -> tuple[str, Policy, str]:
    """The store URL, the policy and a line saying where both came from: ``--policy`` (said to
    override the run's own when it recorded one), else the run's (``abserve.report.locate``)."""
    from abserve.report.locate import LocateError, find_policy, override_note

    url, path, where = store_location(run_id, db, runs)
    with open_store(url) as store:
        run = store.get_run(run_id)
    if run is None:
        raise ReportError(f"no run {run_id!r} in the store")
    if policy is not None:
        return url, _policy(policy), f"{where}; policy: {policy} ({override_note(run.provenance)})"
    try:
        found = find_policy(run_id, path, run.provenance)
    except LocateError as exc:
        raise ReportError(str(exc)) from exc
    return url, found.policy, f"{where}; policy: {found.policy.name} from {found.source}"


def judged_by() -> dict[str, object]:
    """The abserve version that made this report (the run's own provenance says what ran)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {"abserve_version": version("abserve")}
    except PackageNotFoundError:
        return {"abserve_version": None}


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
    """Judge RUN_ID and write report.html, report.md, report.json and junit.xml into OUT
    (and, with --summary-md, the first screen as Markdown for a CI job)."""
    from abserve.report.summary_file import target, write_run

    try:
        summary = target(summary_md, summary_link_base)
        url, chosen, where = locate(run_id, db, policy, runs)
        typer.echo(where)
        paths = build_report(url, run_id, out, DEFAULT_POLICY, baseline, policy=chosen)
    except (ReportError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(USAGE_ERROR) from exc
    typer.echo(f"verdict: {paths.verdict} (exit {paths.exit_code})")
    for p in (paths.html, paths.markdown, paths.json, paths.junit):
        typer.echo(f"wrote {p}")
    if summary is not None and paths.judgment is not None:
        typer.echo(f"summary appended to {write_run(summary, paths.judgment, out)}")
    raise typer.Exit(paths.exit_code)


def make_plan(db: str, run_id: str, policy: Policy, **kwargs: object) -> Plan:
    """Plan a run from the pilot ``run_id`` in the store (see ``abserve.compare.plan.plan``)."""
    from abserve.compare.plan import plan

    with open_store(db) as store:
        if store.get_run(run_id) is None:
            raise ReportError(f"no run {run_id!r} in the store")
        exchanges = list(store.iter_exchanges(run_id))
    try:
        return plan(exchanges, policy, **kwargs)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ReportError(str(exc)) from exc


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
    """How many requests a run needs to detect an effect, from a pilot run's variance."""
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
    """Show a run's progress from its store while it runs: per arm requests, errors and
    mismatches, the critical gates' current intervals, the time left; exits 0 when it ends."""
    from abserve.report.watch import run_watch

    raise typer.Exit(run_watch(run_id, db, policy, every, once, budget, wait, runs))


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("report")(report)
    app.command("plan")(plan_command)
    app.command("watch")(watch)
    from abserve.report.placement_bias import placement_bias

    app.command("placement-bias")(placement_bias)
