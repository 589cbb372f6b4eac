"""Neighbours on the arms' cores: how much of those cores' time went to threads outside the arms.

The CPU default puts the arms on one or two cores so that whatever else the machine does slows
both alike. That promise ends when a third party shares the arms' core: two vLLM servers of
another run pinned to core 0 shrank the self-test's known 5.5 ms per-token regression to
+1.4 ms [-1.1, +4.0] (issue 34), and nothing in the report said the core had other tenants.
This module measures it, per block of a run:

- per CPU the arms ran on: the share of the block's wall time the CPU was busy (``/proc/stat``,
  machine-wide, so it also sees processes of other containers), the share the arms' threads got
  (their ``schedstat`` run time), and the rest, which went to threads outside the arms'
  server process trees (the router, the load generator, this process, anyone else's) — the
  ``foreign`` share; with the visible foreign threads that ran there, named by command;
- per arm: CPU time its server processes got and the time they were runnable but waited on a
  run queue (``schedstat``), both in seconds over the block.

The core (``snapshot_from``, ``block_facts``) is pure: it works on texts read
from ``/proc`` and on the arms' thread ids. ``NeighbourSampler`` is the thin shell: a daemon
thread that reads ``/proc`` every ``interval_s`` (a thread's run time between two samples is
counted on the CPU it is on at the later one: exact for the pinned arms; a floating neighbour
is named only where it sat at both samples; the foreign share itself is the CPU's busy time
from ``/proc/stat`` minus the arms', so it is exact whoever the neighbours are), started and
stopped around each block by the orchestrator.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from abserve.arms.server import VllmServer

USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (idle and iowait are not busy)
TOP_FOREIGN = 4  # foreign commands named per core


@dataclass(frozen=True)
class ThreadStat:
    """One thread at one instant: its process, command, CPU it last ran on and schedstat."""

    pid: int
    comm: str
    cpu: int
    run_ns: int
    wait_ns: int


@dataclass
class Snapshot:
    """The machine at one instant: every visible thread and every CPU's busy ticks."""

    at: float
    threads: dict[int, ThreadStat] = field(default_factory=dict)
    busy_ticks: dict[int, int] = field(default_factory=dict)


def parse_cpu_busy(proc_stat: str) -> dict[int, int]:
    """``/proc/stat`` -> busy ticks per CPU (``cpu0`` ... lines; the ``cpu`` total is skipped)."""
    out: dict[int, int] = {}
    for line in proc_stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        values = [int(v) for v in rest.split()]
        out[int(name[3:])] = sum(values[i] for i in BUSY_FIELDS if i < len(values))
    return out


def parse_thread(pid: int, stat: str, schedstat: str) -> ThreadStat | None:
    """One thread from its ``stat`` and ``schedstat`` texts; None when unreadable."""
    close = stat.rfind(")")
    if close < 0:
        return None
    comm = stat[stat.find("(") + 1:close]
    fields = stat[close + 2:].split()
    sched = schedstat.split()
    if len(fields) < 37 or len(sched) < 2:
        return None
    return ThreadStat(pid=pid, comm=comm, cpu=int(fields[36]), run_ns=int(sched[0]), wait_ns=int(sched[1]))


def snapshot_from(at: float, proc_stat: str, threads: Iterable[tuple[int, int, str, str]]) -> Snapshot:
    """A snapshot from ``/proc/stat`` and ``(pid, tid, stat, schedstat)`` texts."""
    snap = Snapshot(at=at, busy_ticks=parse_cpu_busy(proc_stat))
    for pid, tid, stat, schedstat in threads:
        parsed = parse_thread(pid, stat, schedstat)
        if parsed is not None:
            snap.threads[tid] = parsed
    return snap


@dataclass
class _Core:
    arms_ns: int = 0
    foreign_ns: dict[int, int] = field(default_factory=dict)  # tid -> run ns seen on this core
    comm: dict[int, str] = field(default_factory=dict)


def _deltas(samples: list[Snapshot]) -> Iterable[tuple[int, ThreadStat, int, int, bool]]:
    """``(tid, thread at the later sample, run ns, wait ns, stayed)`` between consecutive
    samples; ``stayed``: on the same CPU at both (a thread born in between: its CPU now)."""
    for before, after in itertools.pairwise(samples):
        if not before.threads:
            continue
        for tid, now in after.threads.items():
            then = before.threads.get(tid)
            run, wait = (now.run_ns, now.wait_ns) if then is None else (
                now.run_ns - then.run_ns, now.wait_ns - then.wait_ns)
            yield tid, now, max(run, 0), max(wait, 0), then is None or then.cpu == now.cpu


def block_facts(samples: list[Snapshot], arm_of: Mapping[int, str],
                cpus: Mapping[str, Iterable[int]]) -> dict[str, object]:
    """What foreign load the arms' CPUs carried between the first and the last sample.

    ``arm_of``: thread id -> arm, for every thread of the arms' server process trees;
    ``cpus``: each arm's CPUs in this block (unpinned arms: none, nothing to say about a core).
    Every other thread is foreign. Shares are of the wall time between the first and last sample.
    """
    if len(samples) < 2:
        return {}
    wall = samples[-1].at - samples[0].at
    watched = sorted({c for arm_cpus in cpus.values() for c in arm_cpus})
    cores = {c: _Core() for c in watched}
    arms: dict[str, dict[str, float]] = {arm: {"cpu_s": 0.0, "wait_s": 0.0, "threads": 0} for arm in cpus}
    seen: dict[str, set[int]] = {arm: set() for arm in cpus}
    for tid, thread, run, wait, stayed in _deltas(samples):
        arm = arm_of.get(tid)
        if arm is not None and arm in arms:
            arms[arm]["cpu_s"] += run / 1e9
            arms[arm]["wait_s"] += wait / 1e9
            seen[arm].add(tid)
        core = cores.get(thread.cpu)
        if core is None or run <= 0:
            continue
        if arm is not None:
            core.arms_ns += run  # the arms are pinned: their time is on their CPUs
        elif stayed:  # a floating neighbour is named where it stayed between two samples
            core.foreign_ns[tid] = core.foreign_ns.get(tid, 0) + run
            core.comm[tid] = thread.comm
    for arm, tids in seen.items():
        arms[arm]["threads"] = len(tids)
    first, last = samples[0].busy_ticks, samples[-1].busy_ticks
    out_cores = {str(c): core_facts(cores[c], (last.get(c, 0) - first.get(c, 0)) / USER_HZ, wall)
                 for c in watched}
    return {"seconds": round(wall, 3), "cores": out_cores,
            "arms": {a: {k: round(v, 4) for k, v in f.items()} for a, f in arms.items()}}


def core_facts(core: _Core, busy_s: float, wall: float) -> dict[str, object]:
    """One CPU's shares of the wall time: busy, the arms', foreign (busy minus the arms'), and
    the visible foreign threads that ran there (count and the busiest commands)."""
    arms_s = core.arms_ns / 1e9
    busy_s = max(busy_s, arms_s)
    by_comm: dict[str, float] = {}
    for tid, ns in core.foreign_ns.items():
        by_comm[core.comm[tid]] = by_comm.get(core.comm[tid], 0.0) + ns / 1e9
    top = sorted(by_comm.items(), key=lambda kv: -kv[1])[:TOP_FOREIGN]
    scale = max(wall, 1e-9)
    return {"busy": round(min(busy_s / scale, 1.0), 4), "arms": round(min(arms_s / scale, 1.0), 4),
            "foreign": round(min(max(busy_s - arms_s, 0.0) / scale, 1.0), 4),
            "foreign_threads": sum(ns >= 1e6 for ns in core.foreign_ns.values()),  # ran >= 1 ms
            "top": [[comm, round(s / scale, 4)] for comm, s in top]}


# ---- the shell: reading /proc --------------------------------------------------------------

def read_snapshot(proc: str = "/proc") -> Snapshot:
    """Every visible thread's stat and schedstat, and ``/proc/stat``, now."""
    def texts() -> Iterable[tuple[int, int, str, str]]:
        for entry in os.scandir(proc):
            if not entry.name.isdigit():
                continue
            try:
                tids = os.listdir(f"{proc}/{entry.name}/task")
            except OSError:
                continue
            for tid in tids:
                base = f"{proc}/{entry.name}/task/{tid}"
                try:
                    with open(f"{base}/stat") as s, open(f"{base}/schedstat") as ss:
                        yield int(entry.name), int(tid), s.read(), ss.read()
                except (OSError, ValueError):
                    continue

    with open(f"{proc}/stat") as handle:
        proc_stat = handle.read()
    return snapshot_from(time.monotonic(), proc_stat, texts())


def tree_threads(pid: int, proc: str = "/proc") -> set[int]:
    """Thread ids of a process and all its descendants (read from ``/proc``)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return set()
    tids: set[int] = set()
    for p in procs:
        try:
            tids.update(int(t) for t in os.listdir(f"{proc}/{p.pid}/task"))
        except OSError:
            continue
    return tids


class NeighbourSampler:
    """Samples ``/proc`` every ``interval_s`` in a daemon thread while a block runs.

    ``arm_pids``: each arm's server root pid (its tree is re-read at every sample, so a
    restarted worker is still the arm's); ``cpus``: each arm's CPUs in this block.
    """

    def __init__(self, arm_pids: Mapping[str, int], cpus: Mapping[str, Iterable[int]],
                 interval_s: float = 1.0, read: Callable[[], Snapshot] = read_snapshot) -> None:
        self.arm_pids, self.cpus = dict(arm_pids), {a: tuple(c) for a, c in cpus.items()}
        self.interval_s, self._read = interval_s, read
        self.samples: list[Snapshot] = []
        self.arm_of: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="abserve-neighbours", daemon=True)

    def _sample(self) -> None:
        for arm, pid in self.arm_pids.items():
            self.arm_of.update(dict.fromkeys(tree_threads(pid), arm))
        self.samples.append(self._read())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> NeighbourSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()

    def facts(self) -> dict[str, object]:
        """This block's facts (``block_facts``); empty when nothing was sampled."""
        return block_facts(self.samples, self.arm_of, self.cpus)


def block_sampler(servers: Mapping[str, VllmServer],
                  placement: Mapping[str, Iterable[int]]) -> NeighbourSampler:
    """A sampler of foreign load on one block's arm CPUs (the managed arms with a process)."""
    pids = {name: s.process.pid for name, s in servers.items() if s.process is not None}
    return NeighbourSampler(pids, {name: placement.get(name, ()) for name in pids})
