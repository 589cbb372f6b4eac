"""CLI commands of the traffic area: ``abserve load`` (bounded headless Locust) and
``abserve corpus`` (write a corpus to JSONL for replay or inspection)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from abserve.base import exit_codes
from abserve.base.limits import MAX_ERROR_RATE
from abserve.cli.extras import require
from abserve.traffic.sources import formats

if TYPE_CHECKING:
    from abserve.traffic.remote import LoadWorkers
    from abserve.traffic.sources import FileSource

# abserve.traffic.corpus.API_KEY_ENV, named here so the CLI starts without importing the corpus
API_KEY_ENV = "ABSERVE_API_KEY"
ShapeOpt = Annotated[str, typer.Option(help="closed | constant | poisson | step | sweep")]


def register(app: typer.Typer) -> None:
    """Attach this area's commands to the root CLI."""
    app.command("load")(load)
    app.command("corpus")(corpus)
    app.command("load-worker")(load_worker)


def load(
    host: Annotated[str, typer.Option(help="router or OpenAI-compatible server URL")],
    also_host: Annotated[list[str] | None, typer.Option(
        help="another router replica of the same run (repeatable): request k goes to replica "
             "k mod n, the next one when it cannot be reached (docs/scale-out.md)")] = None,
    profile: Annotated[str | None, typer.Option(
        help="profile name (configs/traffic) or YAML path")] = None,
    requests: Annotated[int | None, typer.Option(help="send exactly N requests")] = None,
    duration: Annotated[float | None, typer.Option(help="or run for S seconds")] = None,
    users: Annotated[int, typer.Option(help="concurrent users (open loop: pool)")] = 4,
    shape: ShapeOpt = "closed",
    rate: Annotated[float, typer.Option(help="requests/s for open-loop shapes")] = 0.0,
    sweep_rates: Annotated[str, typer.Option(help="comma-separated rates for sweep")] = "",
    seed: Annotated[int | None, typer.Option(
        help="corpus seed (default: profile's); a traffic file: which lines --sample keeps")] = None,
    run_id: Annotated[str | None, typer.Option(help="run id tag")] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/load"),
    max_error_rate: Annotated[float, typer.Option(
        help="stop early once the error rate is above this (the policies' max_error_rate)")] = MAX_ERROR_RATE,
    model: Annotated[str | None, typer.Option(help="model name")] = None,
    tokenize_url: Annotated[str | None, typer.Option(help="/tokenize server")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override key=value")] = None,
    corpus_file: Annotated[Path | None, typer.Option("--corpus", help="replay JSONL")] = None,
    processes: Annotated[int, typer.Option(help="Locust worker processes")] = 1,
    load_workers: Annotated[int, typer.Option(
        help="Locust workers on other hosts, each started with `abserve load-worker --master "
             "HOST:PORT` (docs/scale-out.md); 0: none")] = 0,
    master_bind: Annotated[str, typer.Option(
        help="with --load-workers: where this host's Locust master listens (HOST:PORT)")] = "0.0.0.0:5557",
    worker_wait: Annotated[float, typer.Option(
        help="with --load-workers: refuse the load when they have not all connected within S "
             "seconds")] = 120.0,
    api_key: Annotated[str | None, typer.Option(
        envvar=API_KEY_ENV, show_envvar=True, show_default=False,
        help="the router's API key, sent as a Bearer token (the router reads the same variable)")] = None,
    requests_file: Annotated[Path | None, typer.Option(
        help="send this traffic file instead of a profile (docs/traffic-files.md)")] = None,
    file_format: Annotated[str, typer.Option(
        "--format", help=formats.names_help())] = "auto",
    replay: Annotated[str, typer.Option(
        help="recorded: at the file's arrival times (--users caps requests in flight); "
             "closed: --users users back to back")] = "recorded",
    time_scale: Annotated[float, typer.Option(help="0.5 replays twice as fast")] = 1.0,
    sample: Annotated[float, typer.Option(help="send this fraction of the lines (--seed)")] = 1.0,
    greedy: Annotated[bool, typer.Option(help="send sampling requests with temperature 0")] = False,
    allow_sampling: Annotated[bool, typer.Option(
        help="the router allows seeded sampling: send sampling requests as they are")] = False,
    skip_invalid: Annotated[bool, typer.Option(help="count and list bad lines, send the rest")] = False,
    sessions: Annotated[bool, typer.Option(
        help="replay conversations as sessions (turn k after turn k-1 ended, plus think_s); "
             "--no-sessions: one request per line (ShareGPT: first turn)")] = True,
    media_host: Annotated[list[str] | None, typer.Option(
        help="an http(s) image host the router and the arms both allow (repeatable)")] = None,
    max_body_bytes: Annotated[int | None, typer.Option(help="the router's body limit")] = None,
    max_images: Annotated[int | None, typer.Option(help="the router's image limit")] = None,
    block_size: Annotated[int, typer.Option(help="a mooncake trace: tokens per hash id")] = 512,
    trace_images: Annotated[int, typer.Option(
        help="a mooncake trace: seeded images after each full hash block")] = 0,
    trace_tokenizer: Annotated[str | None, typer.Option(
        help="a mooncake trace: the served model's tokenizer.json, for blocks of exactly "
             "--block-size tokens")] = None,
    max_context: Annotated[int | None, typer.Option(
        help="the model's context in tokens: longer trace lines are refused before sending")] = None,
) -> None:
    """Send a bounded load of one traffic profile, or a traffic file, and write per-request timings."""
    require("locust", "gevent")  # the service extra's: Locust runs in a child process
    from abserve.traffic.runner import LoadError, LoadSpec, run_load

    spec = LoadSpec(
        profile or "", host, requests=requests, duration=duration, users=users, seed=seed,
        run_id=run_id or f"load-{uuid.uuid4().hex[:12]}", out_dir=out, shape=shape,  # type: ignore[arg-type]
        rate=rate, max_error_rate=max_error_rate, model=model, tokenize_url=tokenize_url,
        overrides=set_ or [], corpus=corpus_file, sweep_rates=_rates(sweep_rates),
        processes=processes, api_key=api_key,
        workers=_load_workers(load_workers, master_bind, worker_wait), also_hosts=also_host or ())
    if requests_file is not None:
        if profile is not None or corpus_file is not None or duration is not None:
            raise typer.BadParameter("--requests-file replaces --profile, --corpus and --duration")
        if shape != "closed" or rate or sweep_rates:
            raise typer.BadParameter("a traffic file is sent at its recorded times or closed loop "
                                     "(--replay, --time-scale); --shape and --rate do not apply")
        source, count = _checked_source(
            requests_file, format=file_format, replay=replay, time_scale=time_scale, sample=sample,
            seed=seed or 0, greedy=greedy, skip_invalid=skip_invalid, model=model, sessions=sessions,
            seeded_sampling="allow" if allow_sampling else "refuse",
            allowed_media_hosts=tuple(h.lower() for h in media_host or ()),
            **({"max_body_bytes": max_body_bytes} if max_body_bytes else {}),
            **({"max_images": max_images} if max_images is not None else {}),
            trace={"block_size": block_size, "images_per_block": trace_images,
                   "tokenizer": trace_tokenizer}, max_context=max_context)
        spec = replace(spec, requests=requests or count, profile=source.label, source=source)
    elif profile is None:
        raise typer.BadParameter("give --profile or --requests-file")
    if (spec.requests is None) == (spec.duration is None):
        raise typer.BadParameter("give exactly one of --requests or --duration")
    try:
        summary = run_load(spec)
    except LoadError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    typer.echo(f"run {summary.run_id}: {summary.requests_sent} requests, {summary.failures} "
               f"failed ({summary.stop_reason or 'stopped'}); timings: {summary.timings_path}")
    if summary.stop_reason == "error_rate":
        raise typer.Exit(exit_codes.LOAD_ERROR_RATE)
    if summary.stop_reason == "worker_lost":  # a --processes run whose worker died
        raise typer.Exit(exit_codes.LOAD_WORKER_LOST)


def _load_workers(count: int, bind: str, wait_s: float) -> LoadWorkers | None:
    """``--load-workers`` and its options as the load's ``LoadWorkers`` (None: no remote ones)."""
    from pydantic import ValidationError

    from abserve.traffic.remote import LoadWorkers

    if count <= 0:
        return None
    try:
        return LoadWorkers(count=count, bind=bind, connect_timeout_s=wait_s)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc


def load_worker(
    master: Annotated[str, typer.Option(help="the Locust master's address, HOST:PORT "
                                        "(`abserve load --load-workers` or `abserve run` with "
                                        "load.workers)")],
    runs: Annotated[int, typer.Option(help="stop after this many load runs (0: until stopped)")] = 0,
) -> None:
    """Send load for a master on another host, one Locust worker run after another.

    Each worker joins the master's next load run: the master sends the traffic, its schedule
    and every option, so this host needs only abserve (with its service extra) installed.
    """
    from abserve.traffic.remote import serve_worker, split_address

    try:
        split_address(master)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    served = serve_worker(master, runs)
    typer.echo(f"load-worker: served {served} load run(s) for {master}")


def _rates(text: str) -> list[float] | None:
    """``--sweep-rates`` as numbers (None when none are given)."""
    try:
        return [float(r) for r in text.split(",") if r.strip()] or None
    except ValueError as exc:
        raise typer.BadParameter(f"--sweep-rates takes comma-separated numbers, not {text!r}") from exc


def _checked_source(path: Path, **options: object) -> tuple[FileSource, int]:
    """The file source, checked here first so a bad file fails before Locust starts."""
    from pydantic import ValidationError

    from abserve.traffic.sources import FileSource, RequestsFileError, check_file, label_for

    try:
        source = FileSource.model_validate({"path": path, "label": label_for(path), **options})
        check = check_file(source)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except RequestsFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    typer.echo(check.describe())
    if source.max_context is None and source.format == "mooncake":
        typer.echo("note: the model's context is not known here, so trace lines were not checked "
                   "against it (give --max-context)")
    checked = {"checked": check.requests, "checked_sessions": check.sessions}
    return source.model_copy(update=checked), check.requests


def corpus(
    profile: Annotated[str, typer.Option(help="profile name or YAML path")],
    out: Annotated[Path, typer.Option(help="JSONL file to write")],
    requests: Annotated[int, typer.Option(help="corpus size")] = 16,
    seed: Annotated[int | None, typer.Option(help="seed (default: profile's)")] = None,
    model: Annotated[str, typer.Option(help="model name written into each body")] = "default",
    tokenize_url: Annotated[str | None, typer.Option(help="/tokenize server")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override key=value")] = None,
) -> None:
    """Build a corpus and write it as JSONL (replay it with `abserve load --corpus`)."""
    from abserve.traffic.calibrate import HttpTokenizer
    from abserve.traffic.corpus import build_corpus, write_jsonl
    from abserve.traffic.profiles import ProfileError, load_profile, parse_overrides

    try:
        prof = load_profile(profile, parse_overrides(set_ or []))
    except ProfileError as exc:
        raise typer.BadParameter(str(exc)) from exc
    tokenizer = HttpTokenizer(tokenize_url, model) if tokenize_url else None
    try:
        entries = build_corpus(prof, prof.seed if seed is None else seed, requests, model,
                               tokenizer=tokenizer)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    n = write_jsonl(entries, out)
    typer.echo(f"wrote {n} requests of {prof.name} to {out}")
