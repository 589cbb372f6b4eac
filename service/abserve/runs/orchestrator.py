"""``abserve run``: one experiment from servers to sign-off report.

Builds the tiny model if missing, starts every arm's vLLM server with its lookup mode,
proves each arm's lookup with a multimodal probe before any load, starts the router,
drives the configured traffic profiles through it with headless Locust, then records the
arms' provenance and telemetry in the store, judges the run and writes the report. Every
process it started is stopped on success, failure and Ctrl-C; a run that does not finish
is left in the store as interrupted, so ``abserve report`` marks it invalid. A lock file
refuses a second concurrent run on the same machine.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx
from rich.console import Console

from abserve.arms import arm_servers
from abserve.arms.arm_checks import ArmCheckError, ArmFacts, check_arms
from abserve.arms.arm_pool import ArmPool
from abserve.arms.compose_target import ComposeServer, compose_servers, server_identity
from abserve.arms.run_paths import LoadStopped, RunError, RunPaths, RunRefused
from abserve.arms.server import ServerStartError, VllmServer, free_port, start_servers, stop_servers
from abserve.arms.watch import ArmDeath, ArmDied, watch_arms
from abserve.compare.family import Family
from abserve.compare.policy import Policy
from abserve.config import BudgetConfig, ExperimentConfig
from abserve.ledger.baseline import resolve_accepted
from abserve.ledger.book import record_family_signoff
from abserve.model.provenance import BlockRecord, LoadStopRecord
from abserve.model.records import RunInfo
from abserve.model.telemetry import FLUSH_INTERVAL_S, Proof, prove_lookup
from abserve.report.summary_file import SummaryTarget
from abserve.runs.blocks import experiment_blocks
from abserve.runs.capacity_stage import CapacityRun, store_capacity
from abserve.runs.context import RunContext
from abserve.runs.family import family_of, write_family_signoff
from abserve.runs.load_plan import run_load_plan
from abserve.runs.load_seen import record_load_seen
from abserve.runs.provenance import arm_provenance, run_provenance
from abserve.runs.rounds import (
    RoundLog,
    judging_roles,
    preflight_report,
)
from abserve.runs.router_process import RouterProcess, router_settings, run_api_key
from abserve.runs.run_guard import exclusive_run, sigterm_as_interrupt

EXIT_INVALID = 3


def ensure_model(config: ExperimentConfig) -> Path:
    """The model directory, built offline first when the config names a builder."""
    if config.model.builder == "tiny-llava":
        from abserve.arms.tiny_model import TinyModelSpec, ensure_tiny_model

        return ensure_tiny_model(config.model.path, TinyModelSpec(**config.model.spec))
    if not config.model.path.exists():
        raise RunRefused(f"model path {config.model.path} does not exist")
    return config.model.path


def make_servers(config: ExperimentConfig, model: Path, paths: RunPaths) -> dict[str, VllmServer]:
    """One server per arm (``abserve.arms.arm_servers``), pinned to its CPUs of the first block."""
    first = experiment_blocks(config)[0].placement
    return arm_servers.make_servers(config, model, first, paths.log, paths.telemetry)


def check_arm_setup(config: ExperimentConfig, model: Path) -> dict[str, ArmFacts]:
    """Refuse bad interpreters, unknown vLLM args, unset references and unreachable external
    arms before any server starts (``abserve.arms.arm_checks``)."""
    try:
        return check_arms(config, arm_servers.full_argv(config, model))
    except ArmCheckError as exc:
        raise RunRefused(str(exc)) from None


def prove_arms(config: ExperimentConfig, servers: dict[str, VllmServer], console: Console) -> None:
    """Each arm must prove its lookup inside the gather step before any load is sent."""
    from abserve.arms.probe import probe_body

    body = probe_body(config.model.served_name)
    for name, server in servers.items():
        if config.arms[name].expected_mode is None:
            continue  # nothing to prove (an external arm, or vLLM untouched): reported unproven
        response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300)
        if response.status_code != 200:
            raise RunError(f"probe request to arm {name} failed: HTTP {response.status_code}")
    for name, server in servers.items():
        if config.arms[name].expected_mode is None:
            kind = config.arms[name].kind
            console.print(f"arm {name} ({kind}): [yellow]unproven[/] (no lookup to prove; its /version "
                          "is recorded)" if kind == "external" else
                          f"arm {name} ({kind}): no lookup to prove; identified by what its server "
                          "reports it ran (vLLM version, arguments, image)")
            continue
        if server.telemetry_dir is None:
            raise RunError(f"arm {name} has no telemetry directory: its lookup cannot be proven")
        expected = config.arms[name].expected_mode
        proof = await_proof(server, expected)
        if not proof.ok:
            raise RunError(f"arm {name} did not prove lookup {expected!r}: {proof.detail}")
        console.print(f"[green]arm {name}[/] proved [bold]{proof.proven}[/]: {proof.detail}")


def await_proof(server: VllmServer, expected: str | None, flushes: int = 4) -> Proof:
    """The arm's proof, read again until it holds or ``flushes`` telemetry flushes passed
    (the plugin writes its counters every ``FLUSH_INTERVAL_S``)."""
    deadline = time.monotonic() + flushes * FLUSH_INTERVAL_S
    while True:
        proof = prove_lookup(server.telemetry(), expected)
        if proof.ok or time.monotonic() >= deadline:
            return proof
        time.sleep(FLUSH_INTERVAL_S / 5)


def record_provenance(ctx: RunContext, blocks: list[BlockRecord] | None = None,
                      rounds: RoundLog | None = None, died: ArmDeath | None = None,
                      stopped: LoadStopped | None = None) -> RunInfo:
    """Write each arm's proof, telemetry and server args and the run's provenance to the store
    (with why the run ended early: an arm that ``died``, a load ``stopped`` before its end)."""
    from abserve.store import Store

    config, servers, paths, run_id = ctx.config, ctx.servers, ctx.paths, ctx.run_id
    with Store.open(paths.database_url) as store:
        run = store.get_run(run_id)
        if run is None:
            raise RunError(f"the router recorded no run {run_id}")
        run.arms = {name: arm_provenance(name, server, config.arms[name], ctx.facts.get(name))
                    for name, server in servers.items()}
        run.provenance = run_provenance(config, ctx.config_path, ctx.model, blocks)
        run.provenance.arm_environment = {name: server_identity(server.telemetry())["environment"]
                                          for name, server in servers.items()
                                          if isinstance(server, ComposeServer)}
        if rounds is not None:
            run.provenance.sequential = rounds.as_provenance()
        if died is not None:
            run.provenance.arm_death = died.as_provenance()
        if stopped is not None:
            run.provenance.load_stop = LoadStopRecord(
                profile=stopped.profile, stop_reason=stopped.stop_reason, exit_code=stopped.exit_code,
                reason=stopped.describe())
        store.update_run(run)
        return run


def new_run_id(config: ExperimentConfig) -> str:
    return f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def start_arms(config: ExperimentConfig, paths: RunPaths, pool: ArmPool, target: str,
               console: Console) -> tuple[Path | None, dict[str, ArmFacts], dict[str, VllmServer]]:
    """The arms of ``target`` started and ready: the model (None under compose: the arms load
    it), what the checks found of each arm, and each arm's server."""
    if target == "compose":  # compose started them: only waited for (arms/compose_target.py)
        servers: dict[str, VllmServer] = dict(compose_servers(config, paths.telemetry, paths.log))
        console.print(f"waiting for the compose arms {', '.join(f'vllm-{n}' for n in servers)} ...")
        start_servers(list(servers.values()))
        return None, {}, servers
    if images := [name for name, arm in config.arms.items() if arm.kind == "image"]:
        raise RunRefused(f"arms {images} are images, which docker compose runs: scripts/signoff.sh "
                         "CONFIG, or `docker compose up` with ABSERVE_CONFIG in .env (docs/gpu.md)")
    model = ensure_model(config)
    facts = check_arm_setup(config, model)
    servers, to_start = pool.adopt(config, make_servers(config, model, paths))
    modes = ", ".join(f"{n}={a.expected_mode or a.kind + ' (unproven)'}" for n, a in config.arms.items())
    console.print(f"starting arms {modes} ...")
    if kept := [name for name, server in servers.items() if server.process is not None]:
        console.print(f"arms {', '.join(kept)}: servers kept running from an earlier experiment")
    started = time.monotonic()
    start_servers(to_start, pin_when_ready=True)
    console.print(f"arms ready in {time.monotonic() - started:.0f} s")
    return model, facts, servers


def run_experiment(config: ExperimentConfig, config_path: Path, out: Path, console: Console,
                   budget: BudgetConfig | None = None, pool: ArmPool | None = None,
                   target: str = "local", run_id: str | None = None,
                   database_url: str | None = None, summary: SummaryTarget | None = None) -> int:
    """Run the whole experiment; return the report's exit code (3 when the run is invalid; 6 or
    7 when its load stopped at its error limit or lost a worker, with an INVALID report).

    With a budget (``budget`` or the config's ``budget:``) the load goes in rounds judged
    after each and stops when the answer is known (``abserve.runs.rounds``). With a
    ``pool`` (``abserve selftest``) arms take over servers an earlier experiment kept, and
    leave theirs to later ones (``abserve.arms.arm_pool``). ``target``: where the arms run,
    ``local`` processes (and ``url:`` endpoints) or ``compose`` services
    (``abserve.arms.compose_target``); ``run_id`` and ``database_url`` name the run and its
    store (default: a new id, SQLite in ``out``); ``summary``: ``--summary-md`` (``write_signoff``).

    A run that does not reach its end (a failure, Ctrl-C, SIGTERM) stops every process it
    started and is marked ``interrupted`` in the store, so any report of it is invalid.
    """
    try:
        config = resolve_accepted(config, RunPaths(out, database_url).database_url)  # a: {from: accepted}
        policy, rounds, reach = preflight_report(config, budget)
    except ValueError as exc:
        raise RunRefused(str(exc)) from exc
    began = time.monotonic()
    paths = RunPaths(out, database_url)
    paths.log("x").parent.mkdir(parents=True, exist_ok=True)
    remove_stale_report(out)
    ctx = RunContext(config, config_path, paths, run_id or new_run_id(config), console)
    run_id = ctx.run_id
    finished = False
    died: ArmDeath | None = None
    stopped: LoadStopped | None = None
    pool = pool or ArmPool()  # without one, this run's servers are all its own
    with exclusive_run(), sigterm_as_interrupt():
        try:
            console.print(f"[bold]abserve run[/] {config.name} -> {out} (run {run_id})")
            for line in reach.lines():  # expected cost, gates the traffic leaves out
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            if config.capacity is not None:
                console.print(config.capacity.expected_cost(), markup=False, highlight=False)
            ctx.model, ctx.facts, ctx.servers = start_arms(config, paths, pool, target, console)
            prove_arms(config, ctx.servers, console)
            ctx.router = RouterProcess(
                router_settings(config, ctx.servers, paths, run_id, free_port(),
                                judging_roles(config, policy)),
                paths,
                run_api_key(config), arm_servers.router_arms(config, ctx.servers)[1],
            )
            ctx.router.start()
            with watch_arms(ctx.servers):
                blocks = run_load_plan(ctx, rounds, policy, began)
                capacity = CapacityRun(ctx, config.capacity).run() if config.capacity else None
            ctx.router.stop()
            record_provenance(ctx, blocks, rounds)
            if capacity is not None:
                store_capacity(paths.database_url, run_id, capacity)
            finished = True
        except ArmDied as exc:  # the load stopped at once; what was answered is recorded
            died = exc.death
            console.print(f"[bold red]{died.describe()}[/]; run stopped")
        except LoadStopped as exc:  # the same: an INVALID report saying why, the exit 6 or 7 kept
            stopped = exc
            console.print(f"[bold red]{exc.describe()}[/]; run stopped")
        except ServerStartError as exc:
            raise RunError(str(exc)) from exc
        finally:
            if ctx.router is not None:
                ctx.router.stop()
            stop_servers(pool.release(config, ctx.servers, finished))
            if ctx.router is not None and not finished:
                mark_interrupted(paths.database_url, run_id)
    if died is not None or stopped is not None:  # judged anyway: the report is INVALID and says why
        record_provenance(ctx, rounds=rounds, died=died, stopped=stopped)
    record_load_seen(paths.database_url, run_id, paths.out / "load")  # the router has stopped
    code = write_signoff(paths.database_url, run_id, config.policy, out, console,
                         judging_roles(config, policy), family_of(config), summary)
    return stopped.exit_code if stopped is not None else code


REPORT_FILES = ("report.html", "report.md", "report.json", "junit.xml")


def remove_stale_report(out: Path) -> None:
    """An earlier run's report in ``out`` must not pass for this run's if this one fails."""
    out.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        (out / name).unlink(missing_ok=True)


def mark_interrupted(database_url: str, run_id: str) -> None:
    """The router marks its run completed when it shuts down cleanly; an unfinished run is not."""
    from abserve.store import Store

    with Store.open(database_url) as store:
        if store.get_run(run_id) is not None:
            store.finish_run(run_id, "interrupted")


def write_signoff(db: str, run_id: str, policy_path: Path, out: Path, console: Console,
                  policy: Policy | None = None, family: Family | None = None,
                  summary: SummaryTarget | None = None) -> int:
    """Judge the stored run, write the report files, print the verdict; return its exit code.

    ``policy``: the policy read from ``policy_path`` with the arm roles this experiment has.
    ``family``: several candidates, each judged against the baseline with Holm's correction.
    ``summary``: also append the first screen as Markdown (``abserve.report.summary_file``)."""
    from abserve.ledger.signoff import build_report
    from abserve.report.summary_file import write_family, write_run

    if family is not None and policy is not None:
        judged = write_family_signoff(db, run_id, policy, policy_path, family, out)
        record_family_signoff(db, run_id, judged, out)  # the ledger's entry: the family's verdict
        console.print(f"{judged.correction}")
        for name, line in judged.candidates.items():
            console.print(f"  {judged.baseline} vs {name}: {line.verdict.upper()} (alpha {line.alpha:.4g}) "
                          f"{out / f'vs-{name}' / 'report.html'}")
        console.print(f"verdict: [bold]{judged.verdict.upper()}[/] (exit {judged.exit_code}) "
                      f"{out / 'report.md'}")
        if summary is not None:
            console.print(f"  summary appended to {write_family(summary, judged, run_id, out)}")
        return judged.exit_code

    report = build_report(db, run_id, out, policy_path, policy=policy)
    colour = {"pass": "green", "fail": "red", "invalid": "red"}.get(report.verdict, "yellow")
    console.print(f"verdict: [bold {colour}]{report.verdict.upper()}[/] (exit {report.exit_code})")
    for path in (report.html, report.markdown, report.json, report.junit):
        console.print(f"  {path}")
    if summary is not None and report.judgment is not None:
        console.print(f"  summary appended to {write_run(summary, report.judgment, out)}")
    return report.exit_code
