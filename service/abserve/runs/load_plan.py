"""The load of ``abserve run``: blocks of every profile through the router, judged in rounds.

Without rounds exactly ``blocks.count`` blocks are sent; with rounds (a sequential experiment,
``abserve.runs.rounds``) the blocks go on until the stop rule says the answer is known or the
budget is spent, the run's digest fed each round's new exchanges (``abserve.runs.looks``).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from abserve.arms import arm_servers
from abserve.arms.cache_metrics import BlockCacheReader
from abserve.arms.neighbours import block_sampler
from abserve.arms.run_paths import LoadStopped, RunError, RunPaths, RunRefused
from abserve.compare.family import Family
from abserve.compare.model import DECIDED
from abserve.model.placement import Block
from abserve.runs.blocks import apply_placement, block_record, experiment_blocks
from abserve.runs.family import family_of, interim_family
from abserve.runs.looks import IncrementalLooks
from abserve.runs.progress import LiveProgress
from abserve.runs.rounds import (
    RoundLog,
    block_requests,
    block_shares,
    infinite_plan,
    interim_judgment,
    judging_roles,
    rotations,
    round_requests,
    should_stop,
    wait_recorded,
)
from abserve.runs.router_process import load_url

if TYPE_CHECKING:
    from abserve.compare import Judgment
    from abserve.compare.family import FamilyJudgment
    from abserve.compare.policy import Policy
    from abserve.model.provenance import BlockRecord
    from abserve.runs.context import RunContext
    from abserve.traffic.runner import LoadSpec, LoadSummary


def send_block(ctx: RunContext, block: Block) -> BlockRecord:
    """Re-pin the arms for ``block`` (when the config rotates CPU sets) and send its share of
    every profile, one after another, each request tagged with the block and placement; the
    block's record carries the foreign load its arms' CPUs saw (``abserve.arms.neighbours``)
    and each arm's prefix-cache queries and hits (``abserve.arms.cache_metrics``)."""
    config, servers = ctx.config, ctx.servers
    pinned = None
    if config.blocks.cpu_sets is not None:
        pinned = apply_placement(servers, block.placement)
        time.sleep(config.blocks.settle_s)
    started = time.time()
    tags = {"block": str(block.index)}
    if any(block.placement.values()):  # unpinned arms: placement not controlled, not tagged
        tags["placement"] = block.label
    with block_sampler(servers, block.placement) as sampler, BlockCacheReader(servers) as cache:
        sent = send_shares(ctx, block, tags)
    # with the foreign load on the arms' cores (arms/neighbours.py)
    record = block_record(block, started, time.time(), sent, pinned, sampler.facts())
    if cache.counts:  # each arm's prefix-cache hits (arms/cache_metrics.py); none: not written
        record.prefix_cache = cache.counts
    return record


def send_shares(ctx: RunContext, block: Block, tags: dict[str, str]) -> int:
    """Send the block's share of every profile, one after another; return the requests sent."""
    from abserve.traffic.runner import LoadSpec
    from abserve.traffic.sources.replay import block_skip

    config, router, run_id = ctx.config, ctx.running_router(), ctx.run_id
    target = load_url(config, router.url)
    sent = 0
    for i, (item, share) in enumerate(zip(config.load.profiles, block_shares(config), strict=True)):
        overrides = [f"{key}={json.dumps(value)}" for key, value in item.set.items()]
        source = config.file_source(item, block_skip(share, block.index)) if item.kind == "file" else None
        summary = _run_load(LoadSpec(
            item.profile, target, requests=share[block.index % len(share)], users=config.load.users,
            seed=config.load.seed + i + 1000 * block.index, run_id=run_id,
            out_dir=ctx.paths.out / "load" / f"block-{block.index}" / item.profile,
            model=config.model.served_name, tokenize_url=arm_servers.tokenize_url(config, ctx.servers),
            overrides=overrides,
            max_error_rate=config.load.max_error_rate, tags=tags,
            shape=config.load.shape, rate=config.load.rate, api_key=router.api_key, source=source,
            workers=config.load.workers, also_hosts=config.load.replicas,
        ))
        if summary.abort_reason:
            raise LoadStopped(f"load {item.profile} stopped: {summary.abort_reason} ({summary.failures} of "
                              f"{summary.requests_sent} requests failed, the limit is "
                              f"{config.load.max_error_rate:.1%}); see {summary.log_path}",
                              summary.stop_reason, item.profile)
        sent += summary.requests_sent
    return sent


def send_warmup(ctx: RunContext) -> None:
    """Requests of the first profile before block 0, tagged ``block=warmup``."""
    from abserve.traffic.runner import LoadSpec

    config, router = ctx.config, ctx.running_router()
    item = config.load.profiles[0]
    _run_load(LoadSpec(item.profile, load_url(config, router.url), requests=config.blocks.warmup_requests,
                      users=config.load.users, seed=config.load.seed + 999_999, run_id=ctx.run_id,
                      out_dir=ctx.paths.out / "load" / "warmup", model=config.model.served_name,
                      tokenize_url=arm_servers.tokenize_url(config, ctx.servers),
                      overrides=[f"{key}={json.dumps(value)}" for key, value in item.set.items()],
                      max_error_rate=config.load.max_error_rate, tags={"block": "warmup"},
                      api_key=router.api_key, workers=config.load.workers,
                      also_hosts=config.load.replicas,
                      source=config.file_source(item) if item.kind == "file" else None))


def _run_load(spec: LoadSpec) -> LoadSummary:
    """``run_load``; load workers on other hosts that never came refuse the run (exit 4)."""
    from abserve.traffic.runner import WorkersMissing, run_load

    try:
        return run_load(spec)
    except WorkersMissing as exc:
        raise RunRefused(str(exc)) from exc


def run_load_plan(ctx: RunContext, rounds: RoundLog | None = None, policy: Policy | None = None,
                  started: float = 0.0) -> list[BlockRecord]:
    """Send the load in blocks (``abserve.runs.blocks``) and return each block's record.

    With ``rounds`` (a sequential experiment, ``abserve.runs.rounds``) the blocks go on in
    rounds until the stop rule says the answer is known or the budget is spent; without,
    exactly ``blocks.count`` blocks are sent.
    """
    config, router, console = ctx.config, ctx.running_router(), ctx.console
    plan = experiment_blocks(config) if rounds is None else infinite_plan(config)
    per_round, blocks_per_round = round_requests(config), rotations(config)
    total = config.blocks.warmup_requests + (  # a sequential run's grows block by block
        sum(item.requests for item in config.load.profiles) if rounds is None else 0)
    records: list[BlockRecord] = []
    looks: IncrementalLooks | None = None  # the run's digest, fed each round's new exchanges
    with LiveProgress(router.url, router.api_key, list(ctx.servers), total, console) as progress:
        if config.blocks.warmup_requests:
            send_warmup(ctx)
        round_began = time.monotonic()
        for block in plan:
            if rounds is not None:
                progress.expect(block_requests(config, block.index))
            records.append(send_block(ctx, block))
            if rounds is None or policy is None or (block.index + 1) % blocks_per_round:
                continue
            rounds.rounds += 1
            rounds.requests = config.blocks.warmup_requests + sum(r.requests or 0 for r in records)
            looks = looks or IncrementalLooks(judging_roles(config, policy), family_of(config))
            judgment = judge_so_far(ctx.paths, ctx.run_id, rounds.requests, looks.policy,
                                    family_of(config), records, looks)
            stop = should_stop(rounds, judgment, started, time.monotonic() - round_began, per_round)
            console.print(look_line(rounds))
            if stop:
                break
            round_began = time.monotonic()
    if rounds is not None:
        console.print(f"sequential: {rounds.stop_reason}")
    return records


def look_line(rounds: RoundLog) -> str:
    """One line per look, for a log without a live display (``docker compose up``'s output)."""
    look = rounds.looks[-1]
    open_gates = [name for name, outcome in look.gates.items() if outcome not in DECIDED]
    decided = len(look.gates) - len(open_gates)
    return (f"look {look.round}: {look.requests} requests in {look.seconds:.0f} s; {decided} of "
            f"{len(look.gates)} gates decided" + (f"; open: {', '.join(open_gates)}" if open_gates else ""))


def judge_so_far(paths: RunPaths, run_id: str, expected: int, policy: Policy,
                 family: Family | None = None,
                 blocks: list[BlockRecord] | None = None,
                 looks: IncrementalLooks | None = None) -> Judgment | FamilyJudgment:
    """The interim judgment of what the router has recorded so far (of every candidate when
    the experiment has several: ``abserve.runs.family``); ``blocks``: the block records so
    far, whose neighbour facts the judgment weighs (``abserve.compare.contamination``)."""
    from abserve.store import Store

    with Store.open(paths.database_url) as store:
        wait_recorded(lambda: store.count_exchanges(run_id), expected)
        run = store.get_run(run_id)
        if run is None:
            raise RunError(f"the router recorded no run {run_id}")
        if looks is not None:  # only the exchanges stored since the last look are read
            looks.update(store, run_id)
            if family is not None:
                return interim_family(run, looks, policy, family)
            return interim_judgment(run, looks.digest, policy, blocks)
        if family is not None:
            return interim_family(run, list(store.iter_exchanges(run_id)), policy, family)
        return interim_judgment(run, list(store.iter_exchanges(run_id)), policy, blocks)
