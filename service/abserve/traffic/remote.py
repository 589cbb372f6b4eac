"""Load from several hosts: Locust's own master/worker protocol across the network.

``abserve load`` or ``abserve run`` with ``LoadWorkers`` runs Locust's master on this host,
listening on ``bind`` (``HOST:PORT``), and waits for ``count`` workers; each load host runs
``abserve load-worker --master HOST:PORT`` (``worker_command``), which needs only abserve
installed and the master's address: it serves one Locust worker after another, so it joins
every load run (each block of ``abserve run`` is one) that master starts.

The master owns the traffic and its schedule. Each worker gets the master's options (Locust
sends them with the spawn message) and builds shard ``i`` of ``n`` of the same seeded corpus and
the same arrival plan (``traffic.shapes.shard_arrivals``), so the requests and their planned
arrival times are those of one process, whatever the number of workers; the workers' clocks
start at the master's spawn message. Workers on other hosts write nothing to the master's
paths: each writes its timings in a spool directory of its own and ships them to the master
over the Locust connection (``ship``: the master writes ``timings-<worker>.jsonl`` and the
worker's summary in its output directory, as if the worker ran beside it).

Failures: workers that have not all connected ``connect_timeout_s`` after the master started
are refused (the load stops as a setup error naming how many came: ``abserve load`` exits 4);
a worker lost mid-run (no heartbeat for ~3 s: its host died) ends the run as ``worker_lost``
(``abserve load`` exits 7; ``abserve run`` writes an INVALID report and exits 7).
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Packaged, so an installed abserve sends load from any directory (abserve.loadtest).
LOCUSTFILE = Path(__file__).resolve().parents[1] / "loadtest" / "locustfile.py"
DEFAULT_PORT = 5557  # Locust's own master port
CONNECT_TIMEOUT_S = 120.0
WORKERS_MISSING = "workers_missing"  # the master's stop reason when its workers did not all come


def split_address(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``HOST:PORT`` (or ``HOST``, or ``[v6]:PORT``) as host and port; ValueError if bad."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or str(default_port)
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif ":" in text and not _is_ip(text):
        raise ValueError(f"{text!r} is not HOST:PORT (an IPv6 address with a port: [ADDR]:PORT)")
    else:
        host, port = text, str(default_port)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host, int(port)


class LoadWorkers(BaseModel):
    """Locust workers on other hosts, one ``abserve load-worker`` each (the config's
    ``load.workers``; ``abserve load --load-workers``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count: int = Field(ge=1, le=256)  # workers the master waits for; each sends one shard
    bind: str = f"0.0.0.0:{DEFAULT_PORT}"  # where the master listens (HOST:PORT)
    # the address the load hosts reach this host at (``abserve run``: its router listens
    # there); default: bind's host, which must then be a specific address
    advertise: str | None = None
    connect_timeout_s: float = Field(CONNECT_TIMEOUT_S, gt=0, le=3600)

    @field_validator("bind")
    @classmethod
    def _address(cls, value: str) -> str:
        split_address(value)
        return value

    @property
    def host(self) -> str:
        return split_address(self.bind)[0]

    @property
    def port(self) -> int:
        return split_address(self.bind)[1]

    @property
    def reachable_host(self) -> str:
        """The address load hosts use for this host (advertise, else bind's host)."""
        host = self.advertise or self.host
        if _unspecified(host):
            raise ValueError(f"load.workers: bind {self.bind} listens everywhere; set advertise "
                             "to the address the load hosts reach this host at")
        return host

    def master_args(self) -> list[str]:
        """Locust's master options, and ``--abserve-ship`` (workers send their timings here)."""
        return ["--master", "--master-bind-host", self.host, "--master-bind-port", str(self.port),
                "--expect-workers", str(self.count),
                "--abserve-worker-wait", str(self.connect_timeout_s), "--abserve-ship", "1",
                # Locust's own give-up, a backstop: abserve's (above) says how many came
                "--expect-workers-max-wait", str(int(self.connect_timeout_s) + 10)]


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a name


def worker_command(locustfile: Path, master: str) -> list[str]:
    """The Locust worker one ``abserve load-worker`` runs (its options come from the master)."""
    host, port = split_address(master)
    return [sys.executable, "-m", "locust", "-f", str(locustfile), "--worker",
            "--master-host", host, "--master-port", str(port)]


def spool_dir() -> Path:
    """Where a shipping worker writes its timings (never the master's paths)."""
    return Path(tempfile.mkdtemp(prefix="abserve-load-worker-"))


def shipment(node: str, timings: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """What a worker ships to the master: its name, its timings (JSONL text), its summary."""
    text = timings.read_text() if timings.is_file() else ""
    return {"node": node, "timings": text, "summary": summary}


def receive(out_dir: Path, data: dict[str, Any]) -> None:
    """Master: write a worker's shipment where a worker beside it would have (``runner``)."""
    node = str(data["node"])
    if not node.replace("-", "").isalnum():
        raise ValueError(f"bad worker name {node!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"timings-{node}.jsonl").write_text(str(data["timings"]))
    summary = {**data["summary"], "node": node, "shipped": True}
    (out_dir / f"node-{node}-remote.json").write_text(json.dumps(summary))


def serve_worker(master: str, runs: int = 0, pause_s: float = 1.0) -> int:
    """``abserve load-worker``: one Locust worker after another for the master at ``master``
    (each ends when its master's run does, and the next waits for the next run), until
    stopped or, with ``runs`` > 0, after that many; returns the number served."""
    import subprocess
    import time

    cmd, served = worker_command(LOCUSTFILE, master), 0
    while runs <= 0 or served < runs:
        subprocess.run(cmd, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        served += 1
        time.sleep(pause_s)
    return served
