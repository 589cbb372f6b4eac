"""``arms/neighbours.py``: texts of ``/proc`` -> the share of the arms' CPUs that went to threads
outside the arms' server trees, and each arm's CPU time and run-queue wait; and the sampler on
real ``/proc`` with a real spinning process on a core."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from abserve.arms.neighbours import (
    USER_HZ,
    NeighbourSampler,
    Snapshot,
    block_facts,
    parse_cpu_busy,
    parse_thread,
    snapshot_from,
)


def stat_line(tid: int, comm: str, cpu: int) -> str:
    fields = ["S"] + ["0"] * 35 + [str(cpu)] + ["0"] * 10  # field 39 (processor) is index 36 after ')'
    return f"{tid} ({comm}) " + " ".join(fields)


def proc_stat(busy: dict[int, int]) -> str:
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    lines += [f"cpu{c} {t} 0 0 999 0 0 0 0 0 0" for c, t in busy.items()]
    return "\n".join([*lines, "intr 1 2 3"])


def test_parse_cpu_busy_counts_user_nice_system_irq_softirq_steal() -> None:
    text = "cpu  9 9 9 9 9 9 9 9\ncpu0 10 1 5 1000 7 2 3 4 0 0\ncpu1 1 0 0 5 0 0 0 0\nintr 5"
    assert parse_cpu_busy(text) == {0: 10 + 1 + 5 + 2 + 3 + 4, 1: 1}


def test_parse_thread_reads_comm_with_spaces_cpu_and_schedstat() -> None:
    t = parse_thread(7, stat_line(8, "VLLM::Worker (x)", 1), "1500 250 3\n")
    assert t is not None
    assert (t.pid, t.comm, t.cpu, t.run_ns, t.wait_ns) == (7, "VLLM::Worker (x)", 1, 1500, 250)
    assert parse_thread(7, "garbage", "1 2") is None


def snap(at: float, busy0: int, threads: dict[int, tuple[str, int, int, int]]) -> Snapshot:
    texts = [(tid, tid, stat_line(tid, comm, cpu), f"{run} {wait} 1")
             for tid, (comm, cpu, run, wait) in threads.items()]
    return snapshot_from(at, proc_stat({0: busy0, 1: 0}), texts)


def test_block_facts_splits_a_core_between_the_arms_and_foreign_threads() -> None:
    s0 = snap(0.0, 0, {1: ("arm", 0, 0, 0), 2: ("hog", 0, 0, 0), 3: ("other", 1, 0, 0)})
    ticks = int(9 * USER_HZ)  # 9 s busy of 10
    s1 = snap(10.0, ticks, {1: ("arm", 0, 3_000_000_000, 2_000_000_000), 2: ("hog", 0, 6_000_000_000, 0),
                            3: ("other", 1, 5_000_000_000, 0), 4: ("born", 0, 500_000, 0)})
    facts = block_facts([s0, s1], {1: "a"}, {"a": [0], "b": []})
    core = facts["cores"]["0"]  # type: ignore[index]
    assert facts["seconds"] == 10.0
    assert (core["busy"], core["arms"], core["foreign"]) == (0.9, 0.3, 0.6)
    assert core["foreign_threads"] == 1  # the hog; the newborn ran 0.5 ms, under 1 ms
    assert core["top"][0] == ["hog", 0.6]
    assert facts["arms"]["a"] == {"cpu_s": 3.0, "wait_s": 2.0, "threads": 1}  # type: ignore[index]
    assert list(facts["cores"]) == ["0"]  # type: ignore[call-overload]


def test_a_neighbour_that_moved_between_samples_is_not_named_on_either_core() -> None:
    s0 = snap(0.0, 0, {2: ("roamer", 1, 0, 0)})
    s1 = snap(1.0, 0, {2: ("roamer", 0, 900_000_000, 0)})
    assert block_facts([s0, s1], {}, {"a": [0]})["cores"]["0"]["foreign_threads"] == 0  # type: ignore[index]
    assert block_facts([s0], {}, {"a": [0]}) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")
@pytest.mark.process
def test_the_sampler_sees_a_spinning_process_on_the_arms_core() -> None:
    cpu = sorted(os.sched_getaffinity(0))[0]
    arm = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"],
                           preexec_fn=lambda: os.sched_setaffinity(0, [cpu]))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, [cpu]))
    try:
        time.sleep(0.3)
        with NeighbourSampler({"a": arm.pid}, {"a": [cpu]}, interval_s=0.25) as sampler:
            time.sleep(1.5)
        facts = sampler.facts()
    finally:
        for p in (arm, hog):
            p.kill()
            p.wait()
    core = facts["cores"][str(cpu)]  # type: ignore[index]
    assert core["foreign"] > 0.5  # the spinning process had the core nearly to itself
    assert core["arms"] < 0.2
    assert any(comm.startswith("python") for comm, _ in core["top"])
    assert facts["arms"]["a"]["threads"] >= 1  # type: ignore[index]
