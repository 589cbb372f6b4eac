"""Servers start on every CPU and are pinned to their own once ready (``start_servers``).

A real child process stands in for vLLM (a ``/health`` endpoint and a few threads, as a
server's tree has): during start-up its affinity is every CPU of the machine, and once
``start_servers(..., pin_when_ready=True)`` returns every thread of it sits on its CPUs; two
arms sharing a core start their CPU workers bound to different cores (``start_cpus``).
Without the option the tree is pinned from exec on, as before.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from abserve.arms.pinning import tree_affinities
from abserve.arms.server import ServerSpec, VllmServer, start_servers, stop_servers

pytestmark = [pytest.mark.server,  # a child process serves /health as vLLM would
              pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity only")]

# The end of every stand-in: /health answers 200, as vLLM's does.
HEALTH = """
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""

CHILD = """
import http.server, json, os, sys, threading, time
port, seen = int(sys.argv[1]), sys.argv[2]
with open(seen, "w") as f:
    json.dump([sorted(os.sched_getaffinity(0)), os.environ.get("VLLM_CPU_OMP_THREADS_BIND")], f)
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
""" + HEALTH


@dataclass
class StandIn(VllmServer):
    """A VllmServer whose command is the stand-in child, not vLLM."""

    seen: Path = Path()

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-c", CHILD, str(self.port), str(self.seen)]


def stand_in(tmp_path: Path, cpus: list[int], name: str = "a") -> StandIn:
    spec = ServerSpec(model=str(tmp_path), startup_timeout_s=60)
    return StandIn(name, spec, None, tmp_path / f"{name}.log", None, cpus=cpus,
                   seen=tmp_path / f"seen-{name}.json")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to tell pinned from not")
def test_start_runs_on_every_cpu_and_pins_once_ready(tmp_path: Path) -> None:
    """Two arms that share a core: the CPU worker of the second starts bound to another core."""
    every = sorted(os.sched_getaffinity(0))
    servers = [stand_in(tmp_path, every[:1], name) for name in ("a", "a2")]
    try:
        start_servers(servers, pin_when_ready=True)
        starts = [json.loads(server.seen.read_text()) for server in servers]
        assert starts == [[every, str(every[0])], [every, str(every[1])]]  # start-up was not squeezed
        for server in servers:
            assert server.process is not None
            seen = tree_affinities(server.process.pid)
            assert len(seen) >= 4
            assert seen == [{every[0]}] * len(seen)
    finally:
        stop_servers(servers)


def test_without_the_option_the_tree_is_pinned_from_exec(tmp_path: Path) -> None:
    first = sorted(os.sched_getaffinity(0))[:1]
    server = stand_in(tmp_path, first)
    try:
        start_servers([server])
        assert json.loads(server.seen.read_text()) == [first, str(first[0])]
        assert server.process is not None
    finally:
        stop_servers([server])


SLOW_EXIT = """
import http.server, signal, sys, time
port, seen = int(sys.argv[1]), sys.argv[2]
def on_term(*_):
    with open(seen, "a") as f:
        f.write(f"term {time.time()}\\n")
    time.sleep(1.0)  # a vLLM server takes a few seconds to shut down
    with open(seen, "a") as f:
        f.write(f"exit {time.time()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
""" + HEALTH


@dataclass
class SlowExit(StandIn):
    """A stand-in that takes a second to exit after SIGTERM and writes down when."""

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-c", SLOW_EXIT, str(self.port), str(self.seen)]


def test_servers_are_stopped_together_not_one_after_another(tmp_path: Path) -> None:
    spec = ServerSpec(model=str(tmp_path), startup_timeout_s=60)
    servers = [SlowExit(name, spec, None, tmp_path / f"{name}.log", None, seen=tmp_path / f"{name}.txt")
               for name in ("a", "b", "c")]
    start_servers(servers)
    stop_servers(servers)
    events = {s.name: dict(line.split() for line in s.seen.read_text().splitlines()) for s in servers}
    assert all(s.process is not None and s.process.poll() is not None for s in servers)
    last_term = max(float(e["term"]) for e in events.values())
    first_exit = min(float(e["exit"]) for e in events.values())
    assert last_term < first_exit, events  # every server was told before any had finished


@pytest.mark.parametrize("pid", [1, 0, -1])
def test_the_whole_machines_tree_is_never_pinned(pid: int) -> None:
    from abserve.arms.pinning import pin_tree

    with pytest.raises(ValueError, match="refusing"):
        pin_tree(pid, [0])
