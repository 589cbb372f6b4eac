"""Pinning a running server: every thread of its process tree moved onto a CPU set, and the
affinities read back from the kernel (the proof a block's placement took effect)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import psutil


def pin_tree(pid: int, cpus: Sequence[int]) -> None:
    """Move every thread of a process tree onto ``cpus`` (re-pinning a running server).

    Affinity is per thread on Linux, and the CPU worker's OpenMP threads pinned
    themselves, so each thread of each process is moved, not only the main ones. PID 1's tree
    is the whole machine: refused.
    """
    if pid <= 1:
        raise ValueError(f"refusing to pin the process tree of PID {pid}")
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            for thread in proc.threads():
                try:
                    os.sched_setaffinity(thread.id, list(cpus))
                except (ProcessLookupError, PermissionError):
                    continue
        except psutil.Error:
            continue


def thread_affinities(pid: int) -> dict[int, set[int]]:
    """The CPU affinity of every thread of a process tree by thread id, read from the kernel."""
    out: dict[int, set[int]] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                for thread in proc.threads():
                    with contextlib.suppress(OSError):
                        out[thread.id] = set(os.sched_getaffinity(thread.id))
    return out


def tree_affinities(pid: int) -> list[set[int]]:
    """The CPU affinity of every thread of a process tree, read back from the kernel."""
    return list(thread_affinities(pid).values())
