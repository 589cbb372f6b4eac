"""Hosts of their own on this machine: Linux network namespaces on a private bridge.

``private_net()`` makes a switch namespace holding a bridge, and ``Net.add_host`` a namespace
per host linked to it by a veth pair, with an address in a private range (``10.77.0.0/24``:
the namespaces are isolated from the machine's own network, so the range cannot collide with
anything outside them) and loopback up. ``Host.popen`` runs a process inside a host
(``ip netns exec``): it sees only that host's interfaces, so traffic between hosts crosses
real veth links and nothing reaches, or is reached from, the machine's own network.

Everything made is removed on exit, also when the test fails: each process started in a host
is stopped by its PID (SIGTERM, then SIGKILL), any process left in a namespace we made is
killed by the PIDs ``ip netns pids`` names, and the namespaces (with their veths and the
bridge) are deleted. Needs root (``ip netns add``); the namespace names carry this process's
PID, so two tests (or two helpers) never share one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SUBNET = "10.77.0"  # /24; .1 is never used, hosts get .10, .11, ...


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in out.stdout.split()]


@dataclass
class Host:
    """One namespaced host: its namespace name, its address, the processes started in it."""

    name: str
    ns: str
    ip: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run inside this host."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, argv: Sequence[str], log: Path | None = None, **kw: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` in this host (stdout and stderr to ``log`` when given)."""
        out: IO[bytes] | int | None = log.open("wb") if log is not None else kw.pop("stdout", None)
        proc = subprocess.Popen(self.cmd(argv), stdout=out, stderr=subprocess.STDOUT if log else
                                kw.pop("stderr", None), **kw)
        self.procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in this host to its end (text output captured)."""
        return subprocess.run(self.cmd(argv), capture_output=True, text=True, timeout=timeout,
                              check=False, **kw)

    def kill(self) -> None:
        """SIGKILL every process in this host: the host is lost (no goodbye to anyone)."""
        for pid in _netns_pids(self.ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop what runs here: SIGTERM to each process started, then SIGKILL what is left."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.kill()


class Net:
    """A bridge in a switch namespace and the hosts linked to it."""

    def __init__(self) -> None:
        self.tag = f"ab{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
        self.switch = f"{self.tag}-sw"
        self.hosts: dict[str, Host] = {}
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def add_host(self, name: str) -> Host:
        """A new host on the bridge, its loopback and its link up."""
        k = len(self.hosts)
        ns, ip = f"{self.tag}-{name}", f"{SUBNET}.{10 + k}"
        _ip("netns", "add", ns)
        self.hosts[name] = host = Host(name, ns, ip)
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{k}",
            "netns", self.switch)
        _ip("-n", self.switch, "link", "set", f"p{k}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return host

    def close(self) -> None:
        """Stop every host's processes and delete every namespace made (best effort each)."""
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.stop()
        for ns in [*(h.ns for h in self.hosts.values()), self.switch]:
            with contextlib.suppress(Exception):
                for pid in _netns_pids(ns):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


@contextlib.contextmanager
def private_net(*names: str) -> Iterator[dict[str, Host]]:
    """Hosts ``names`` on one private bridge for the block, all removed after it."""
    net = Net()
    try:
        yield {name: net.add_host(name) for name in names}
    finally:
        net.close()


def wait_port(host: Host, ip: str, port: int, timeout_s: float = 60.0,
              proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``ip:port`` accepts a connection, as seen from ``host``."""
    probe = ("import socket,sys\ns=socket.socket();s.settimeout(1)\n"
             "sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process serving {ip}:{port} exited with {proc.returncode}")
        if host.run([sys.executable, "-c", probe, ip, str(port)], timeout=30).returncode == 0:
            return
        time.sleep(0.3)
    raise TimeoutError(f"{ip}:{port} not reachable from {host.name} within {timeout_s:.0f} s")


@contextlib.contextmanager
def postgres_on(host: Host, port: int = 5432) -> Iterator[str]:
    """A throwaway PostgreSQL server in ``host``, listening on its address (``fsync=off``, as
    ``tests.support.postgres``, its files in a fresh temporary directory the server's user
    can reach); yields the URL of a fresh database; stopped and removed on exit."""
    from tests.support.postgres import _as_server_user, _bindir

    base = Path(tempfile.mkdtemp(prefix="abserve-pg-netns-"))
    bindir, prefix = _bindir(), _as_server_user(base)
    data = base / "data"
    subprocess.run([*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    (data / "pg_hba.conf").write_text("host all all 10.77.0.0/24 trust\n"
                                      "local all all trust\n")
    proc = host.popen([*prefix, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                       "-k", str(base), "-c", f"listen_addresses={host.ip}",
                       "-c", "max_connections=200", "-c", "fsync=off",
                       "-c", "full_page_writes=off"], log=base / "server.log")
    try:
        wait_port(host, host.ip, port, proc=proc)
        created = host.run([*prefix, str(bindir / "createdb"), "-h", host.ip, "-p", str(port),
                            "-U", "postgres", "abserve"])
        if created.returncode:
            raise RuntimeError(f"createdb failed: {created.stderr}")
        yield f"postgresql+psycopg://postgres@{host.ip}:{port}/abserve"
    finally:
        from tests.support.postgres import _postmaster_pid

        with contextlib.suppress(ProcessLookupError):
            os.kill(_postmaster_pid(data, proc.pid), signal.SIGINT)  # "fast" shutdown
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
