"""Arm servers shared by the experiments of one ``abserve selftest``.

Every experiment is an ordinary ``abserve run``: it starts its arms' servers and stops them at
its end. The self-test runs three in a row, and some of their arms are the same server: the
outputs experiment's ``a`` and ``a2`` are the floor experiment's ``a`` and ``a2`` and the
latency experiment's ``a`` (the same interpreter, lookup mode, server flags and environment).
Started once, such a server serves every experiment that asks for one like it: 5 starts
instead of 8, each ~25 s of CPU on this kind of machine. Nothing else changes for the run
that takes a server over: it pins the server to its own CPUs, proves the lookup again with
its own probe request, and records only the telemetry of its own requests
(``VllmServer.telemetry_baseline``). A server is kept only after a run that finished, and
only while a later experiment still wants one like it; ``close`` stops whatever is left.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from abserve.arms.server import VllmServer, stop_servers

if TYPE_CHECKING:
    from abserve.config import ExperimentConfig


def server_key(server: VllmServer) -> str:
    """What makes two arms the same server: all it is started with but its port, log,
    telemetry folder and CPUs (each run pins it again)."""
    return json.dumps([server.python, server.lookup_mode, server.spec.model_dump(mode="json"),
                       server.extra_env], sort_keys=True)


def managed(config: ExperimentConfig, servers: dict[str, VllmServer]) -> dict[str, VllmServer]:
    """The servers abserve starts itself (not ``url:`` arms)."""
    return {name: s for name, s in servers.items() if config.arms[name].kind == "managed"}


@dataclass
class ArmPool:
    """Servers kept running between experiments, and how many arms like each are still to run."""

    wanted: Counter[str] = field(default_factory=Counter)
    idle: dict[str, list[VllmServer]] = field(default_factory=dict)

    def expect(self, servers: Iterable[VllmServer]) -> None:
        """Count the managed servers of an experiment still to run (made, not started)."""
        self.wanted.update(server_key(s) for s in servers)

    def adopt(self, config: ExperimentConfig, servers: dict[str, VllmServer]
              ) -> tuple[dict[str, VllmServer], list[VllmServer]]:
        """This run's servers, a kept one in place of each new one like it; and the others,
        to start. A kept server is pinned to the new one's CPUs and counts telemetry afresh."""
        chosen = dict(servers)
        to_start: list[VllmServer] = []
        for name, server in servers.items():
            key = server_key(server)
            if config.arms[name].kind != "managed" or key not in self.idle:
                to_start.append(server)
                continue
            running = self.idle[key].pop()
            if not self.idle[key]:
                del self.idle[key]
            running.name, running.cpus = name, server.cpus
            running.pin()
            running.count_telemetry_from_now()
            chosen[name] = running
        return chosen, to_start

    def release(self, config: ExperimentConfig, servers: dict[str, VllmServer],
                finished: bool) -> list[VllmServer]:
        """Count this run's arms as served; keep the servers of a finished run that later
        experiments still want, and return the others, to stop."""
        stop = [s for name, s in servers.items() if config.arms[name].kind != "managed"]
        for server in managed(config, servers).values():
            key = server_key(server)
            self.wanted[key] -= 1
            alive = server.process is not None and server.process.poll() is None
            if finished and alive and len(self.idle.get(key, [])) < self.wanted[key]:
                self.idle.setdefault(key, []).append(server)
            else:
                stop.append(server)
        return stop

    def close(self) -> None:
        """Stop every server still kept."""
        stop_servers([s for kept in self.idle.values() for s in kept])
        self.idle.clear()
