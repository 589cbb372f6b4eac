"""Where each arm's vLLM CPU worker runs its start-up when arms start unpinned.

``start_servers(..., pin_when_ready=True)`` starts arms on every CPU and pins them to their own
CPUs once all answer ``/health``, so that arms which will share one core while measured (the
CPU default, the self-test's outputs and floor experiments) do not start up squeezed onto it.
vLLM's CPU worker defeated that: it is spawned with OpenMP affinity variables naming the CPUs
of ``VLLM_CPU_OMP_THREADS_BIND``, and libgomp binds the worker's main thread to them as soon as
torch loads it, before the worker imports vLLM (~8 s of one core). Every arm's worker then
imported on the same core, one after another, while the other cores idled (four arms: 88 s
to ready, measured in the self-test).

``start_binds`` gives each such arm start CPUs of the same count (so the worker's thread count
is the one it runs with), on the same NUMA node(s) as its own CPUs (vLLM binds the worker's
memory to the node of the CPUs it binds to, and that binding is not moved by the re-pinning),
rotated from one arm to the next so concurrent start-ups spread over the machine. Nothing is
measured before ``VllmServer.pin`` moves every thread onto the arm's own CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

NODES = Path("/sys/devices/system/node")


def start_binds(targets: Sequence[Sequence[int] | None], usable: Sequence[int],
                node_of: Mapping[int, int]) -> list[tuple[int, ...] | None]:
    """Per arm, the CPUs its worker binds to while starting (None for an arm without CPUs).

    ``targets``: each arm's own CPUs; ``usable``: the CPUs this process may use; ``node_of``:
    CPU -> NUMA node (missing CPUs count as node 0). An arm whose node(s) hold fewer usable
    CPUs than it needs starts on its own CPUs.
    """
    binds: list[tuple[int, ...] | None] = []
    turn = 0  # how many start CPUs have been handed out so far: the next arm starts after them
    for target in targets:
        if not target:
            binds.append(None)
            continue
        nodes = {node_of.get(cpu, 0) for cpu in target}
        pool = sorted(cpu for cpu in set(usable) if node_of.get(cpu, 0) in nodes)
        if len(pool) < len(target):
            binds.append(tuple(sorted(target)))
            continue
        binds.append(tuple(sorted(pool[(turn + i) % len(pool)] for i in range(len(target)))))
        turn += len(target)
    return binds


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list (``0-3,8,10-11``) as CPU numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def numa_nodes(root: Path = NODES) -> dict[int, int]:
    """CPU -> NUMA node as the kernel lists them; empty where sysfs does not say (one node)."""
    node_of: dict[int, int] = {}
    for node in sorted(root.glob("node[0-9]*")):
        try:
            cpus = parse_cpu_list((node / "cpulist").read_text())
        except (OSError, ValueError):
            continue
        node_of.update(dict.fromkeys(cpus, int(node.name.removeprefix("node"))))
    return node_of


def machine_start_binds(targets: Sequence[Sequence[int] | None]) -> list[tuple[int, ...] | None]:
    """``start_binds`` on this machine's usable CPUs and NUMA nodes."""
    return start_binds(targets, sorted(os.sched_getaffinity(0)), numa_nodes())
