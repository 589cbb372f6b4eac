"""Locust glue: options, the per-process run state, and the user that sends the corpus.

``loadtest/locustfile.py`` imports this module; everything Locust-specific lives here and
everything else (corpus, shapes, timing) is plain Python. Each process (local runner or worker)
builds only its shard of the corpus in ``test_start`` — in a thread, so worker heartbeats keep
flowing — before any user starts, so the clock never includes building or base64-encoding.

Bounded runs stop themselves: with ``--abserve-requests N`` each worker sends its shard once
and reports ``abserve_done`` to the master, which quits when every shard is done; with
``--abserve-duration S`` users cycle their shard until S seconds have passed. Either way a
run stops early when its error rate passes ``--abserve-max-error-rate`` (exit code 3).

A worker that dies (SIGKILL, its container killed) never reports its shard, and Locust has no
event for it: it only marks the worker missing after ~3 s without a heartbeat (and stops the
test, without quitting, when that was the last worker). So the master watches its workers
every second while the run is unfinished and ends the run as ``worker_lost`` (exit code 4)
when one is missing or gone. A master run that Locust ends for its own reasons (``--run-time``)
before every shard is done records ``stopped``, never ``completed``. Each process writes
``node-<node>-<pid>.json`` with its ``stop_reason`` when the test stops.

The process that started Locust (``abserve run``, ``abserve load``) passes its pid in
``ABSERVE_PARENT_PID``; if it is killed, the local runner or master ends the run as
``parent_gone`` (exit code 5) instead of sending load to nobody (``abserve.base.parent_watch``).

Workers on other hosts (``abserve.traffic.remote``, ``--abserve-ship``) write their timings
in a spool of their own and ship them to the master, which writes them where a worker beside
it would have; a master told ``--abserve-worker-wait S`` refuses the run as a setup error
when its workers have not all connected S seconds after it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import gevent
from locust import User, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import STATE_INIT, LocalRunner, MasterRunner, WorkerNodes, WorkerRunner

from abserve.base.limits import MAX_ERROR_RATE
from abserve.base.parent_watch import POLL_S, parent_from_env, parent_gone
from abserve.traffic import remote
from abserve.traffic.run_state import Job, RunOptions, RunState, build_state
from abserve.traffic.sender import API_KEY_ENV, CONNECT_RETRY_S, make_pool, send_entry
from abserve.traffic.sources.spec import RequestsFileError
from abserve.traffic.timing import TimingRecord

log = logging.getLogger("abserve.traffic")
EXIT_WORKER_LOST = 4
EXIT_ERROR_RATE = 3
EXIT_SETUP = 2
EXIT_PARENT_GONE = 5
WATCH_INTERVAL_S = 1.0
# run: this process's RunState; done: shards reported done (master); reason: why the run ended;
# workers: worker ids the master has seen this run; watch: the master's worker-watch greenlet
_STATE: dict[str, Any] = {"run": None, "done": set(), "reason": None, "workers": set(),
                          "watch": None}


def _add_options(parser: Any) -> None:
    group = parser.add_argument_group("abserve", "abserve traffic (see abserve.traffic)")
    add = group.add_argument
    add("--abserve-profile", default="multi-image-long-context", help="profile name or YAML path")
    add("--abserve-corpus", default="", help="replay this corpus JSONL instead of building")
    add("--abserve-set", default="", help="profile overrides 'key=value;key=value'")
    add("--abserve-requests", type=int, default=100, help="send exactly N requests, then stop")
    add("--abserve-duration", type=float, default=0.0, help="or run S seconds (wins if set)")
    add("--abserve-corpus-size", type=int, default=64, help="corpus size in duration mode")
    add("--abserve-shape", default="closed", help="closed|constant|poisson|step|sweep")
    add("--abserve-rate", type=float, default=0.0, help="requests/s for open-loop shapes")
    add("--abserve-steps", type=int, default=4, help="steps of the step shape")
    add("--abserve-sweep-rates", default="", help="comma-separated rates for sweep")
    add("--abserve-seed", type=int, default=-1, help="corpus seed (-1: the profile's)")
    add("--abserve-run-id", default="", help="run id tag (default: a fresh one)")
    add("--abserve-out", default="abserve-load", help="directory for timings and summaries")
    add("--abserve-max-error-rate", type=float, default=MAX_ERROR_RATE, help="stop early above this")
    add("--abserve-min-requests", type=int, default=10, help="judge error rate after N")
    add("--abserve-model", default="", help="model name (default: the profile's or /v1/models)")
    add("--abserve-tokenize-url", default="", help="server for /tokenize (default: the host)")
    add("--abserve-timeout", type=float, default=600.0, help="per-request read timeout, s")
    add("--abserve-connect-retry", type=float, default=CONNECT_RETRY_S,
        help="seconds a request that reached nobody (a router restarting) is tried again; 0: never")
    add("--abserve-shards", type=int, default=0, help="workers (default: connected workers)")
    add("--abserve-source", default="", help="a traffic file to send instead of the profile "
        "(abserve.traffic.sources.FileSource as JSON)")
    add("--abserve-also-hosts", default="", help="more router replicas of the run, comma-separated "
        "URLs: request k goes to host k mod n (--host first)")
    add("--abserve-ship", type=int, default=0, help="1: workers on other hosts ship their "
        "timings to the master (abserve.traffic.remote)")
    # not for the command line: the master copies ABSERVE_API_KEY here for its remote workers
    add("--abserve-api-key", default="", help=argparse.SUPPRESS)
    add("--abserve-worker-wait", type=float, default=0.0, help="master: refuse the run when its "
        "workers have not all connected within S seconds (0: wait forever)")
    add("--abserve-tags", default="", help="extra request tags 'key=value;key=value' "
        "(sent as x-abserve-KEY headers, e.g. block=0;placement=a:0,b:1)")


def _on_init(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        runner.register_message("abserve_done", _master_on_done)
        runner.register_message("abserve_abort", _master_on_abort)
        runner.register_message("abserve_ship", _master_on_ship)
        wait = _opts(environment).abserve_worker_wait
        if wait > 0:
            gevent.spawn(_await_workers, environment, runner, wait)
    parent = parent_from_env()  # None in a worker: its parent is the master, not abserve
    if parent is not None:
        gevent.spawn(_watch_parent, environment, parent)


def _watch_parent(environment: Environment, parent: int) -> None:
    """End the run as ``parent_gone`` once the process that started Locust (``abserve run``
    or ``abserve load``, ``PARENT_PID_ENV``) is gone: no load outlives a killed run."""
    while not parent_gone(parent):
        gevent.sleep(POLL_S)
    log.error("abserve: parent process %d is gone (abserve was killed): ending the run", parent)
    _abort(environment, "parent_gone", EXIT_PARENT_GONE)


def _on_test_start(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    opts = _opts(environment)
    _STATE.update(run=None, done=set(), reason=None, workers=set(), watch=None)
    if isinstance(runner, MasterRunner):
        if not opts.abserve_shards:
            opts.abserve_shards = runner.worker_count
        if (runner.target_user_count or 0) < opts.abserve_shards:
            _abort(environment, "setup: fewer users than workers; every worker needs a user "
                   "to send its shard", EXIT_SETUP)
            return
        _STATE["workers"] = set(runner.clients)
        if opts.abserve_ship:  # workers on other hosts send with the run's key (never argv)
            opts.abserve_api_key = os.environ.get(API_KEY_ENV, "")
        _STATE["watch"] = gevent.spawn(_watch_workers, environment, runner)
        return
    shards, shard, node = 1, 0, "local"
    if isinstance(runner, WorkerRunner):
        shards = opts.abserve_shards or opts.expect_workers or 1
        shard, node = runner.worker_index, f"worker{runner.worker_index}"
        if _ships(environment) and opts.abserve_api_key:
            os.environ[API_KEY_ENV] = opts.abserve_api_key  # sender.auth_headers reads it
    try:
        options = RunOptions.from_namespace(opts, environment.host or "", shard, shards, node)
        if _ships(environment):  # on another host: nothing is written to the master's paths
            options = replace(options, out_dir=remote.spool_dir())
        state = gevent.get_hub().threadpool.apply(build_state, (options,))
    except Exception as exc:  # a setup error ends the run with a clear message
        log.error("abserve: load setup failed: %s", exc)
        _abort(environment, f"setup: {exc}", EXIT_SETUP)
        return
    _STATE["run"] = state
    log.info("abserve: %s built %d requests (shard %d of %d) before the clock started",
             node, len(state.entries), shard, shards)


def _on_test_stop(environment: Environment, **_: Any) -> None:
    state: RunState | None = _STATE["run"]
    opts = _opts(environment)
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        _master_on_stop(environment, runner)
    node = "master" if isinstance(runner, MasterRunner) else state.options.node if state else "?"
    summary: dict[str, Any] = {"node": node, "stop_reason": _STATE["reason"],
                               "done_shards": sorted(_STATE["done"])}
    if state is not None:
        summary.update(state.counts())
        state.close()
    if _ships(environment) or (state is None and isinstance(runner, WorkerRunner)):
        # shipped to the master with abserve_ship; or a worker told to quit before its run
        # (it may not even have the master's options: nothing of its own to write)
        if state is not None:
            shutil.rmtree(state.options.out_dir, ignore_errors=True)
        return
    out = Path(opts.abserve_out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"node-{node}-{os.getpid()}.json").write_text(json.dumps(summary))


class ChatUser(User):
    """Sends this process's corpus shard to ``{host}/v1/chat/completions``, streaming."""

    def on_start(self) -> None:
        self.pool = make_pool(1)

    @task
    def send(self) -> None:
        state: RunState | None = _STATE["run"]
        if state is None:
            raise StopUser()
        try:
            job = state.take()
        except RequestsFileError as exc:  # a traffic file changed after it was checked
            log.error("abserve: %s", exc)
            _abort(self.environment, f"traffic file: {exc}", EXIT_SETUP)
            raise StopUser() from exc
        if job is None:
            self._maybe_finish(state)
            raise StopUser()
        for entry in job.later:  # a session: each turn once the one before has ended
            state.note(self._send(state, job))
            self._check_rate(state)
            job = state.follow(entry, time.perf_counter())
        state.finish(self._send(state, job))
        self._check_rate(state)
        self._maybe_finish(state)

    def _check_rate(self, state: RunState) -> None:
        if state.error_rate_exceeded():
            _abort(self.environment, "error_rate", EXIT_ERROR_RATE)
            raise StopUser()

    def _send(self, state: RunState, job: Job) -> TimingRecord:
        """Send one job's request and report it to Locust's statistics."""
        opts = state.options
        hosts = opts.hosts if opts.also_hosts else self.host or opts.host
        record = send_entry(self.pool, hosts, job.entry, opts.sending,
                            arrival=job.arrival, scheduled_at=job.scheduled_at)
        self.environment.events.request.fire(
            request_type="POST", name=opts.profile_name, response_time=(record.e2e_s or 0) * 1000,
            response_length=0, exception=RuntimeError(record.error) if record.error else None,
            context={"corpus_index": record.corpus_index})
        return record

    def _maybe_finish(self, state: RunState) -> None:
        if state.finished() and state.claim_finish():
            _finish(self.environment, state)


def _opts(environment: Environment) -> Any:
    if environment.parsed_options is None:
        raise RuntimeError("abserve load needs Locust's parsed options")
    return environment.parsed_options


def _finish(environment: Environment, state: RunState) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        _ship(environment, state)
        runner.send_message("abserve_done", {"shard": state.options.shard, **state.counts()})
    elif isinstance(runner, LocalRunner):
        _STATE["reason"] = _STATE["reason"] or "completed"
        _end(environment)


def _abort(environment: Environment, reason: str, code: int) -> None:
    runner = environment.runner
    if _STATE["reason"] is None:
        _STATE["reason"] = reason
    environment.process_exit_code = code
    if isinstance(runner, WorkerRunner):
        if _STATE["run"] is not None:
            _ship(environment, _STATE["run"])
        runner.send_message("abserve_abort", {"reason": reason, "code": code})
    else:
        _end(environment)


def _end(environment: Environment) -> None:
    runner = environment.runner
    if runner is None:
        return
    headless = bool(environment.parsed_options and environment.parsed_options.headless)
    gevent.spawn(runner.quit if headless else runner.stop)


def _master_on_done(environment: Environment, msg: Any, **_: Any) -> None:
    _STATE["done"].add(int(msg.data["shard"]))
    if len(_STATE["done"]) >= _opts(environment).abserve_shards:
        _STATE["reason"] = _STATE["reason"] or "completed"
        _end(environment)


def _master_on_abort(environment: Environment, msg: Any, **_: Any) -> None:
    _STATE["reason"] = _STATE["reason"] or str(msg.data["reason"])
    environment.process_exit_code = int(msg.data["code"])
    _end(environment)


def _ships(environment: Environment) -> bool:
    """A worker that ships its timings to the master (``abserve.traffic.remote``)."""
    return isinstance(environment.runner, WorkerRunner) and bool(_opts(environment).abserve_ship)


def _ship(environment: Environment, state: RunState) -> None:
    """Worker: send this shard's timings and counts to the master (before done or abort, on
    the same connection, so the master has them when it ends the run)."""
    runner = environment.runner
    if not _ships(environment) or not isinstance(runner, WorkerRunner) or not state.claim_ship():
        return
    summary = {"stop_reason": _STATE["reason"], "done_shards": [], **state.counts()}
    runner.send_message("abserve_ship", remote.shipment(state.options.node, state.writer.path,
                                                        summary))


def _master_on_ship(environment: Environment, msg: Any, **_: Any) -> None:
    remote.receive(Path(_opts(environment).abserve_out), msg.data)


def _await_workers(environment: Environment, runner: MasterRunner, wait_s: float) -> None:
    """Master: refuse the run (a setup error) when its workers have not all connected
    ``wait_s`` after it started; a run that started is watched by ``_watch_workers``."""
    gevent.sleep(wait_s)
    expected = _opts(environment).expect_workers
    if runner.state != STATE_INIT or len(runner.clients.ready) >= expected:
        return
    reason = (f"{remote.WORKERS_MISSING}: {len(runner.clients.ready)} of {expected} load workers "
              f"connected within {wait_s:.0f} s (start `abserve load-worker --master HOST:PORT` "
              "on each load host)")
    log.error("abserve: %s", reason)
    out = Path(_opts(environment).abserve_out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"node-master-{os.getpid()}.json").write_text(
        json.dumps({"node": "master", "stop_reason": reason, "done_shards": []}))
    environment.process_exit_code = EXIT_SETUP
    runner.quit()  # the workers that came quit too
    sys.exit(EXIT_SETUP)  # Locust's own wait loop would go on: gevent ends the process with it


def lost_workers(clients: WorkerNodes, seen: set[str]) -> list[str]:
    """Ids of the workers that are missing (no heartbeat for ~3 s) or gone from ``clients``
    (Locust drops a missing worker after a minute, and a worker that quits)."""
    missing = {node.id for node in clients.missing}
    return sorted(missing | (seen - set(clients)))


def _watch_workers(environment: Environment, runner: MasterRunner) -> None:
    """Master, while the run is unfinished: end it as soon as a worker is lost."""
    while _STATE["reason"] is None:
        gevent.sleep(WATCH_INTERVAL_S)
        if _STATE["reason"] is not None:
            return
        _STATE["workers"] |= set(runner.clients)
        lost = lost_workers(runner.clients, _STATE["workers"])
        if lost:
            _lose(environment, runner, lost)


def _lose(environment: Environment, runner: MasterRunner, lost: list[str]) -> None:
    names = ", ".join(f"{cid} (shard {runner.get_worker_index(cid)})" for cid in lost)
    log.error("abserve: lost worker %s (no heartbeat or gone) with %d of %d shards done; "
              "ending the run as worker_lost", names, len(_STATE["done"]),
              _opts(environment).abserve_shards)
    _abort(environment, "worker_lost", EXIT_WORKER_LOST)


def _master_on_stop(environment: Environment, runner: MasterRunner) -> None:
    """The test stopped: stop watching; if no reason was recorded (Locust stopped it: its last
    worker went missing, ``--run-time``) and shards are undone, say why instead of nothing."""
    watch = _STATE["watch"]
    if watch is not None and watch is not gevent.getcurrent():
        watch.kill(block=False)
    if _STATE["reason"] is not None or len(_STATE["done"]) >= _opts(environment).abserve_shards:
        return
    lost = lost_workers(runner.clients, _STATE["workers"] | set(runner.clients))
    if lost:  # Locust stops, but does not quit, when its last worker goes missing
        _lose(environment, runner, lost)
    else:
        _STATE["reason"] = "stopped"


# Locust's event hooks (registered by call: its decorator is untyped)
events.init_command_line_parser.add_listener(_add_options)
events.init.add_listener(_on_init)
events.test_start.add_listener(_on_test_start)
events.test_stop.add_listener(_on_test_stop)
