"""One load process's run: its options, its corpus shard, its plan and its counters.

Kept free of Locust so the bookkeeping (which request next, when, and when the run is over)
is plain, testable Python. ``take`` hands out the next request (sleeping until its planned
time for open-loop shapes; gevent makes the sleep cooperative under Locust), ``finish``
records the outcome. With sessions (``SessionRunState``) ``take`` hands out a session's first
turn with its later turns (``Job.later``); the user sends each later turn once the one
before has ended plus its think time (``follow``), noting each answer (``note``) and
finishing the session with the last.
"""

from __future__ import annotations

import threading
import time
import uuid
from argparse import Namespace
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, overload

import httpx

from abserve.traffic.calibrate import HttpTokenizer
from abserve.traffic.corpus import CorpusEntry, build_corpus, parse_tags, read_jsonl
from abserve.traffic.profiles import load_profile, parse_overrides
from abserve.traffic.sender import CONNECT_RETRY_S, SendOptions, auth_headers
from abserve.traffic.shapes import SHAPES, Arrival, ShapeName, plan_arrivals, shard_arrivals
from abserve.traffic.sources import FileSource, StreamedEntries, check_file
from abserve.traffic.sources.replay import SessionStream, Unit, UnitList
from abserve.traffic.timing import TimingRecord, TimingWriter
from abserve.traffic.turns import follows


@dataclass(frozen=True)
class RunOptions:
    """Everything one load process needs to know, validated."""

    host: str
    profile: str
    overrides: dict[str, Any]
    corpus_path: Path | None
    requests: int
    duration: float
    corpus_size: int
    shape: ShapeName
    rate: float
    steps: int
    sweep_rates: list[float]
    seed: int | None
    run_id: str
    out_dir: Path
    max_error_rate: float
    min_requests: int
    model: str
    tokenize_url: str
    timeout_s: float
    shard: int = 0
    shards: int = 1
    node: str = "local"
    profile_name: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # extra x-abserve-* tags of every request
    connect_retry_s: float = CONNECT_RETRY_S  # a request that reached nobody is tried again so long
    source: FileSource | None = None  # a traffic file (``abserve.traffic.sources``) replaces the profile
    also_hosts: tuple[str, ...] = ()  # more router replicas of the run: request k to host k mod n

    @property
    def hosts(self) -> str | tuple[str, ...]:
        """Where requests go: the host, or every replica (``sender.send_entry``)."""
        return (self.host, *self.also_hosts) if self.also_hosts else self.host

    @cached_property
    def sending(self) -> SendOptions:
        """What each request of this process is sent with."""
        return SendOptions(run_id=self.run_id, profile=self.profile_name, worker=self.node,
                           timeout_s=self.timeout_s, tags=self.tags, connect_retry_s=self.connect_retry_s)

    @classmethod
    def from_namespace(cls, ns: Namespace, host: str, shard: int, shards: int,
                       node: str) -> RunOptions:
        """From Locust's parsed options (the ``--abserve-*`` flags)."""
        if ns.abserve_shape not in SHAPES:
            raise ValueError(f"unknown shape {ns.abserve_shape!r} (one of {', '.join(SHAPES)})")
        requests = 0 if ns.abserve_duration > 0 else ns.abserve_requests
        if requests <= 0 and ns.abserve_duration <= 0:
            raise ValueError("give --abserve-requests N or --abserve-duration S (bounded runs)")
        if not host:
            raise ValueError("no target host; pass --host URL")
        if not 0 <= shard < shards:
            raise ValueError(f"worker index {shard} is outside {shards} shards")
        pairs = [p for p in ns.abserve_set.split(";") if p.strip()]
        rates = [float(r) for r in ns.abserve_sweep_rates.split(",") if r.strip()]
        return cls(
            host=host, profile=ns.abserve_profile, overrides=parse_overrides(pairs),
            corpus_path=Path(ns.abserve_corpus) if ns.abserve_corpus else None,
            requests=requests, duration=ns.abserve_duration,
            corpus_size=ns.abserve_corpus_size, shape=ns.abserve_shape, rate=ns.abserve_rate,
            steps=ns.abserve_steps, sweep_rates=rates,
            seed=None if ns.abserve_seed < 0 else ns.abserve_seed,
            run_id=ns.abserve_run_id or f"load-{uuid.uuid4().hex[:12]}",
            out_dir=Path(ns.abserve_out), max_error_rate=ns.abserve_max_error_rate,
            min_requests=ns.abserve_min_requests, model=ns.abserve_model,
            tokenize_url=ns.abserve_tokenize_url, timeout_s=ns.abserve_timeout,
            shard=shard, shards=shards, node=node, tags=parse_tags(ns.abserve_tags),
            connect_retry_s=getattr(ns, "abserve_connect_retry", CONNECT_RETRY_S),
            also_hosts=tuple(h for h in getattr(ns, "abserve_also_hosts", "").split(",") if h),
            source=FileSource.model_validate_json(ns.abserve_source)
            if getattr(ns, "abserve_source", "") else None)


@dataclass(frozen=True)
class Job:
    """One send: the entry, its planned arrival (open loop) and the perf_counter deadline."""

    entry: CorpusEntry
    arrival: Arrival | None
    scheduled_at: float | None
    later: tuple[CorpusEntry, ...] = ()  # a session's later turns, sent one after another


class RunState:
    """The mutable side of one process's run."""

    def __init__(self, options: RunOptions, entries: Sequence[CorpusEntry],
                 plan: list[Arrival] | None) -> None:
        if not entries:
            raise ValueError(f"shard {options.shard} of {options.shards} has no requests; "
                             "send at least as many requests as there are workers")
        self.options = options
        self.entries = entries
        self.plan = plan
        self.writer = TimingWriter(options.out_dir / f"timings-{options.node}.jsonl")
        self._next = 0
        self._origin: float | None = None
        self._lock = threading.Lock()
        self.in_flight = 0
        self.sent = 0
        self.failures = 0
        self.exhausted = False
        self._finish_claimed = False
        self._ship_claimed = False
        self.time_scale = 1.0  # of a session's think times

    def take(self) -> Job | None:
        """The next request to send, or ``None`` when this process has nothing left."""
        with self._lock:
            now = time.perf_counter()
            if self._origin is None:
                self._origin = now
            job = self._next_job(now - self._origin)
            if job is None:
                self.exhausted = True
                return None
            self.in_flight += 1
        if job.scheduled_at is not None:
            time.sleep(max(0.0, job.scheduled_at - time.perf_counter()))
        return job

    def _next_job(self, elapsed: float) -> Job | None:
        opts, k = self.options, self._next
        if self.plan is not None:
            if k >= len(self.plan):
                return None
            arrival = self.plan[k]
            self._next += 1
            if self._origin is None:
                raise RuntimeError("an open-loop plan has no origin: take() sets it first")
            return Job(self.entries[k % len(self.entries)], arrival, self._origin + arrival.offset)
        if opts.requests and k >= len(self.entries):
            return None
        if opts.duration and elapsed >= opts.duration:
            return None
        self._next += 1
        return Job(self.entries[k % len(self.entries)], None, None)

    def follow(self, entry: CorpusEntry, ended_at: float) -> Job:
        """The job for a session's next turn ``entry``, the one before having ended at
        ``ended_at`` (``perf_counter``): sleeps until its think time has passed."""
        think = entry.turn.think_s if entry.turn is not None else 0.0
        at = ended_at + think * self.time_scale
        time.sleep(max(0.0, at - time.perf_counter()))
        return Job(entry, None, at)

    def finish(self, record: TimingRecord) -> None:
        """Count and write one finished request (the last of its job)."""
        self.note(record)
        with self._lock:
            self.in_flight -= 1

    def note(self, record: TimingRecord) -> None:
        """Count and write one answered request (a session's turn before its last)."""
        self.writer.write(record)
        with self._lock:
            self.sent += 1
            self.failures += 0 if record.ok else 1

    @property
    def planned(self) -> int:
        """Requests this process will send in all (0: a run bounded by its duration)."""
        if self.plan is not None:
            return len(self.plan)
        return len(self.entries) if self.options.requests else 0

    def error_rate_exceeded(self) -> bool:
        """Failures above ``max_error_rate`` of what this process sends: of all it will send
        when that is known (the run's rate can then no longer end below the limit, so a single
        early failure does not stop a long run), else of what it has sent so far."""
        opts = self.options
        of = max(self.sent, self.planned)
        return self.sent >= opts.min_requests and self.failures > opts.max_error_rate * of

    def finished(self) -> bool:
        return self.exhausted and self.in_flight == 0

    def claim_finish(self) -> bool:
        """True exactly once, for the user that ends this process's part of the run."""
        with self._lock:
            if self._finish_claimed:
                return False
            self._finish_claimed = True
            return True

    def claim_ship(self) -> bool:
        """True exactly once: a worker ships its timings to the master once (``remote``)."""
        with self._lock:
            shipped, self._ship_claimed = self._ship_claimed, True
            return not shipped

    def counts(self) -> dict[str, Any]:
        return {"shard": self.options.shard, "shards": self.options.shards,
                "planned": len(self.plan) if self.plan is not None else len(self.entries),
                "sent": self.sent, "failures": self.failures, "run_id": self.options.run_id,
                "timings": str(self.writer.path)}

    def close(self) -> None:
        self.writer.close()


class FileRunState(RunState):
    """A traffic file's window, read request by request (``sources.replay``): open loop at the
    recorded offsets (``replay: recorded``; the users cap requests in flight) or closed loop."""

    def __init__(self, options: RunOptions, entries: StreamedEntries, open_loop: bool) -> None:
        super().__init__(options, entries, None)
        self.stream = entries
        self.open_loop = open_loop

    def _next_job(self, elapsed: float) -> Job | None:
        k = self._next
        if k >= len(self.stream):
            return None
        entry, offset = self.stream.next_item(k)
        self._next += 1
        if not self.open_loop:
            return Job(entry, None, None)
        if self._origin is None:
            raise RuntimeError("an open-loop replay has no origin: take() sets it first")
        return Job(entry, Arrival(offset, 0.0), self._origin + offset)


class SessionRunState(RunState):
    """Units of sessions (``sources.replay.Unit``): a user takes a unit and sends its turns
    in a row, turn ``k`` once turn ``k - 1`` has ended (the router ends an answer once every
    arm has) plus the turn's think time times ``time_scale``; sessions run concurrently up to
    the users. Units start at their planned offsets (``open_loop``) or back to back."""

    def __init__(self, options: RunOptions, units: SessionStream | UnitList, open_loop: bool,
                 time_scale: float = 1.0) -> None:
        super().__init__(options, _Sized(len(units)), None)
        self.units, self.open_loop, self.time_scale = units, open_loop, time_scale

    def _next_job(self, elapsed: float) -> Job | None:
        if self.options.duration and elapsed >= self.options.duration:
            return None
        unit = self.units.next_unit()
        if unit is None:
            return None
        first, later = unit.entries[0], unit.entries[1:]
        if not self.open_loop:
            return Job(first, None, None, later)
        if self._origin is None:
            raise RuntimeError("an open-loop replay has no origin: take() sets it first")
        return Job(first, Arrival(unit.offset, 0.0), self._origin + unit.offset, later)


class _Sized(Sequence[CorpusEntry]):
    """The request count of units read one by one (``RunState.entries``: its length only)."""

    def __init__(self, size: int) -> None:
        self._size = size

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, k: int) -> CorpusEntry: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[CorpusEntry]: ...

    def __getitem__(self, k: int | slice) -> CorpusEntry | Sequence[CorpusEntry]:
        raise IndexError("sessions are handed out a unit at a time")


def build_file_state(options: RunOptions, source: FileSource) -> RunState:
    """Check the whole traffic file unless the run did (nothing is sent from a file that
    fails), then stream it: by request, or by session when it has sessions."""
    if source.model is None and options.model:
        source = source.model_copy(update={"model": options.model})
    if source.checked:
        total, sessions = source.checked, source.checked_sessions
    else:
        check = check_file(source)
        total, sessions = check.requests, check.sessions
    source = source.model_copy(update={"limit": options.requests or source.limit or total})
    named = RunOptions(**{**options.__dict__, "profile_name": source.label, "source": source})
    open_loop = source.replay == "recorded"
    if sessions:
        units = SessionStream(source, total, options.shard, options.shards)
        return SessionRunState(named, units, open_loop, source.time_scale)
    entries = StreamedEntries(source, total, options.shard, options.shards)
    return FileRunState(named, entries, open_loop=open_loop)


def build_state(options: RunOptions) -> RunState:
    """Build (or replay) this shard's corpus and plan; everything before the clock starts."""
    if options.source is not None:
        return build_file_state(options, options.source)
    profile = load_profile(options.profile, options.overrides)
    seed = profile.seed if options.seed is None else options.seed
    n = options.requests or options.corpus_size
    if options.corpus_path is not None:
        entries = read_jsonl(options.corpus_path, options.shard, options.shards)
    else:
        model = options.model or profile.model or discover_model(options.host, options.connect_retry_s)
        tokenizer = None
        if profile.chunk_boundary is not None:
            url = options.tokenize_url or profile.chunk_boundary.tokenize_url or options.host
            tokenizer = HttpTokenizer(url, model)
        entries = build_corpus(profile, seed, n, model, shard=options.shard,
                               shards=options.shards, tokenizer=tokenizer)
    named = RunOptions(**{**options.__dict__, "profile_name": profile.name})
    if any(entry.turn is not None for entry in entries):
        return _session_state(named, entries, seed)
    plan = plan_arrivals(options.shape, options.rate,
                         count=options.requests or None, duration=options.duration or None,
                         seed=seed, steps=options.steps, sweep_rates=options.sweep_rates or None)
    if plan is not None:
        plan = shard_arrivals(plan, options.shard, options.shards)
    return RunState(named, entries, plan)


def _session_state(options: RunOptions, entries: Sequence[CorpusEntry], seed: int) -> RunState:
    """A generated (or written) corpus of sessions: its units, each starting at its arrival of
    an open-loop shape's plan (one arrival per session; sessions on worker ``s % shards``
    take the plan's arrivals ``s``) or back to back."""
    groups: list[list[CorpusEntry]] = []
    for entry in entries:
        if groups and follows(groups[-1][-1].turn, entry.turn):
            groups[-1].append(entry)
        else:
            groups.append([entry])
    plan = plan_arrivals(options.shape, options.rate, count=len(groups) * options.shards,
                         seed=seed, steps=options.steps, sweep_rates=options.sweep_rates or None)
    if plan is not None:
        plan = shard_arrivals(plan, options.shard, options.shards)
    offsets = [a.offset for a in plan] if plan is not None else [0.0] * len(groups)
    units = [Unit(tuple(group), at) for group, at in zip(groups, offsets, strict=False)]
    # a run bounded by its duration sends its sessions over and over (closed loop only: an
    # open-loop plan has one arrival per session)
    cycle = bool(options.duration) and plan is None
    return SessionRunState(options, UnitList(units, cycle), plan is not None)


def discover_model(host: str, connect_retry_s: float = CONNECT_RETRY_S) -> str:
    """The first model the server lists at ``/v1/models`` (asked with the load's API key:
    a router with a key refuses the lookup without it). A router that does not answer the
    connection yet (restarting between two profiles) is asked again for ``connect_retry_s``."""
    deadline = time.monotonic() + connect_retry_s
    while True:
        try:
            resp = httpx.get(host.rstrip("/") + "/v1/models", headers=auth_headers(), timeout=30.0)
            resp.raise_for_status()
            return str(resp.json()["data"][0]["id"])
        except httpx.ConnectError as exc:
            if time.monotonic() + 1.0 > deadline:
                raise _no_model(host, exc) from exc
            time.sleep(1.0)
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise _no_model(host, exc) from exc


def _no_model(host: str, exc: Exception) -> ValueError:
    return ValueError(f"could not ask {host}/v1/models for the model name ({exc}); pass --model")
