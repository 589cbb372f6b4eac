"""What a hostile client's connections cost the router, before and after the limits of issue 15
(item 8): unfinished huge request heads, slowloris heads and stalled bodies.

Two ``abserve router`` subprocesses in front of the same two fake upstreams
(``tests/support/fake_upstream.py``): ``before`` runs the router package as it was at git
revision ``--before`` (default: the commit before the limits), ``after`` the working tree,
with ``max_concurrency: 4`` and (after only) ``body_timeout_s: 5`` so the run is short.
Measured per router:

- memory: the router's RSS before and 2 s after ``HEADS`` connections each sent an unfinished
  16 MiB header (each stops when the router closes it);
- slowloris: seconds until the router closes a connection that sends one header line a
  second and never ends its head (and one that sends nothing), capped at ``CAP_S``;
- stalled bodies: ``STALLED`` requests whose body stops after 10 bytes; then the status of
  one ordinary request (503 once stalled bodies hold every admission slot), and what each
  stalled request was answered and when its connection was closed (capped).

    .venv/bin/python -m benchmarks.router_limits [--before REV]

Writes the table into ``benchmarks/router_limits.md`` between the result markers.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml
from benchmarks.router_overhead import export, wait_up
from benchmarks.router_overhead import spawn as python
from tests.support.fake_upstream import free_port

MD = Path(__file__).with_suffix(".md")
HEADS, HEAD_BYTES = 8, 16 << 20
STALLED, CAP_S = 8, 30.0
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
BODY = (b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], '
        b'"max_tokens": 2, "temperature": 0}')


def router(tmp: Path, name: str, ups: list[int], extra: dict[str, object],
           pythonpath: str | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = {"arms": {n: {"url": f"http://127.0.0.1:{p}"} for n, p in zip("ab", ups, strict=True)},
              "dev_mode": True, "run_dir": str(tmp / name), "port": port, "max_concurrency": 4,
              **extra}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return python(["-m", "abserve", "router", "--config", str(tmp / f"{name}.yaml")], env), port


def closed(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) the connection; reads and drops what it sent."""
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def huge_heads(port: int, pid: int) -> tuple[float, float]:
    """RSS (MiB) of the router before and after ``HEADS`` unfinished 16 MiB headers."""
    proc = psutil.Process(pid)
    before = proc.memory_info().rss / 2**20
    socks = []
    for _ in range(HEADS):
        sock = socket.create_connection(("127.0.0.1", port))
        socks.append(sock)
        try:
            sock.sendall(HEAD + b"X-Big: ")
            for _ in range(HEAD_BYTES // 65536):
                sock.sendall(b"a" * 65536)
        except OSError:
            continue  # the router closed it
    time.sleep(2)
    after = proc.memory_info().rss / 2**20
    for sock in socks:
        sock.close()
    return before, after


def slowloris(port: int, trickle: bool) -> float:
    """Seconds until the router closes a head that never ends (capped at ``CAP_S``)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.settimeout(1.0)
        if trickle:
            sock.sendall(HEAD)
        while time.monotonic() - started < CAP_S:
            if closed(sock):
                return time.monotonic() - started
            if trickle:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    return time.monotonic() - started
    return float("inf")


def stalled_bodies(port: int) -> tuple[int, str]:
    """The status of an ordinary request while ``STALLED`` bodies stall, and what became of
    the stalled ones: per answer status, how many and when their connection was closed."""
    socks = []
    for _ in range(STALLED):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(HEAD + b"Content-Length: 100000\r\n\r\n" + BODY[:10])
        sock.setblocking(False)
        socks.append(sock)
    started = time.monotonic()
    time.sleep(0.5)
    status = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=BODY,
                        headers={"content-type": "application/json"}, timeout=30).status_code
    got = {sock: b"" for sock in socks}
    ended: dict[socket.socket, float] = {}
    while len(ended) < len(socks) and time.monotonic() - started < CAP_S:
        ready, _, _ = select.select([s for s in socks if s not in ended], [], [], 0.5)
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            got[sock] += data
            if not data:
                ended[sock] = time.monotonic() - started
    outcomes: dict[str, list[float]] = {}
    for sock in socks:
        line = got[sock].split(b"\r\n", 1)[0].decode() or "no answer"
        key = line.replace("HTTP/1.1 ", "") if sock in ended else f"{line}, still open"
        outcomes.setdefault(key, []).append(ended.get(sock, CAP_S))
        sock.close()
    parts = [f"{len(t)} × {k}" + (f" at {max(t):.1f} s" if "still open" not in k else
                                  f" after {CAP_S:.0f} s") for k, t in outcomes.items()]
    return status, "; ".join(parts)


def secs(value: float) -> str:
    return f"not closed in {CAP_S:.0f} s" if value == float("inf") else f"{value:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description="router limits before/after")
    parser.add_argument("--before", default="f87c387", help="git revision without the limits")
    args = parser.parse_args()
    ups = [free_port(), free_port()]
    procs = [python(["tests/support/fake_upstream.py", "--port", str(p)]) for p in ups]
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        routers = {f"before ({args.before})": router(tmp, "before", ups, {},
                                                     export(args.before, tmp)),
                   "after": router(tmp, "after", ups, {"body_timeout_s": 5}, None)}
        procs += [proc for proc, _ in routers.values()]
        try:
            for port in [*ups, *(p for _, p in routers.values())]:
                wait_up(f"http://127.0.0.1:{port}/livez" if port not in ups
                         else f"http://127.0.0.1:{port}/health")
            for name, (proc, port) in routers.items():
                rss0, rss1 = huge_heads(port, proc.pid)
                loris, silent = slowloris(port, True), slowloris(port, False)
                status, stalled = stalled_bodies(port)
                row = (f"| {name} | {rss0:.0f} → {rss1:.0f} (**{rss1 - rss0:+.0f}**) | "
                       f"{secs(loris)} | {secs(silent)} | {status} | {stalled} |")
                print(row, flush=True)
                rows.append(row)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    header = (f"Last run: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}. {HEADS} unfinished heads of {HEAD_BYTES >> 20} MiB, "
              f"{STALLED} stalled bodies, max_concurrency 4; after: defaults (64 KiB head, 10 s "
              f"head timeout) except body_timeout_s 5.\n\n"
              "| router | RSS MiB with unfinished heads | slowloris closed after | silent "
              "connection closed after | ordinary request while bodies stall | stalled bodies: "
              "answer, connection closed |\n|---|---|---|---|---|---|\n")
    md = MD.read_text() if MD.exists() else "<!-- results -->\n<!-- /results -->\n"
    block = "<!-- results -->\n" + header + "\n".join(rows) + "\n<!-- /results -->"
    MD.write_text(re.sub(r"<!-- results -->.*<!-- /results -->", lambda _: block, md, flags=re.S))


if __name__ == "__main__":
    main()
