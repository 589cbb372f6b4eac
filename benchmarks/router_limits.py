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

A second part (issue 52) measures big bodies that stop arriving, on two routers with the
default limits and ``max_concurrency: 8``: ``--before-rate`` (default: the commit before the
body rate floor) and the working tree. ``BIG`` connections each send ``BIG_BYTES`` of a
larger body, then nothing: the router's RSS before, at its peak while they stall and after
they are answered; the status of an ordinary request while they stall and once they are
answered; and when each stalled connection was answered and closed (capped at ``BIG_CAP_S``).

    .venv/bin/python -m benchmarks.router_limits [--before REV] [--before-rate REV] [--part P]

Writes each part's table into ``benchmarks/router_limits.md`` between its result markers.
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
from collections.abc import Callable
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
BIG, BIG_BYTES, BIG_CAP_S = 8, 30 << 20, 75.0
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
BODY = (b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], '
        b'"max_tokens": 2, "temperature": 0}')


def router(tmp: Path, name: str, ups: list[int], extra: dict[str, object],
           pythonpath: str | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = {"arms": {n: {"url": f"http://127.0.0.1:{p}"} for n, p in zip("ab", ups, strict=True)},
              "dev_mode": True, "run_dir": str(tmp / name), "port": port, "max_concurrency": 4}
    config.update(extra)
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


def until_closed(socks: list[socket.socket], started: float, cap_s: float,
                 tick: Callable[[], None] = lambda: None,
                 ) -> tuple[dict[socket.socket, bytes], dict[socket.socket, float]]:
    """What each connection received and when (seconds after ``started``) the router closed
    it, waiting until all are closed or ``cap_s``; ``tick`` runs every 0.25 s meanwhile."""
    got = {sock: b"" for sock in socks}
    ended: dict[socket.socket, float] = {}
    while len(ended) < len(socks) and time.monotonic() - started < cap_s:
        tick()
        ready, _, _ = select.select([s for s in socks if s not in ended], [], [], 0.25)
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            got[sock] += data
            if not data:
                ended[sock] = time.monotonic() - started
    return got, ended


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
    status = ordinary(port)
    got, ended = until_closed(socks, started, CAP_S)
    outcomes: dict[str, list[float]] = {}
    for sock in socks:
        line = got[sock].split(b"\r\n", 1)[0].decode() or "no answer"
        key = line.replace("HTTP/1.1 ", "") if sock in ended else f"{line}, still open"
        outcomes.setdefault(key, []).append(ended.get(sock, CAP_S))
        sock.close()
    parts = [f"{len(t)} × {k}" + (f" at {max(t):.1f} s" if "still open" not in k else
                                  f" after {CAP_S:.0f} s") for k, t in outcomes.items()]
    return status, "; ".join(parts)


def ordinary(port: int) -> int:
    return httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=BODY,
                      headers={"content-type": "application/json"}, timeout=30).status_code


def send_big(port: int) -> socket.socket:
    """A connection that sent ``BIG_BYTES`` of a body 1 MiB longer, and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % (BIG_BYTES + (1 << 20)))
        chunk = b"x" * (1 << 20)
        for _ in range(BIG_BYTES // len(chunk)):
            sock.sendall(chunk)
    except OSError:
        pass  # refused (503) and closed before it was all sent
    sock.setblocking(False)
    return sock


def big_bodies(port: int, pid: int) -> str:
    """A table row's cells: RSS before / peak / after, the ordinary request's status while
    ``BIG`` big bodies stall and after, and how each stalled connection ended."""
    proc = psutil.Process(pid)
    rss = [proc.memory_info().rss / 2**20]
    socks = [send_big(port) for _ in range(BIG)]
    started = time.monotonic()
    time.sleep(1.0)
    during = ordinary(port)
    got, ended = until_closed(socks, started, BIG_CAP_S,
                              lambda: rss.append(proc.memory_info().rss / 2**20))
    time.sleep(1.0)
    after, rss_after = ordinary(port), proc.memory_info().rss / 2**20
    lines = [got[s].split(b"\r\n", 1)[0].decode().replace("HTTP/1.1 ", "") or "no answer"
             for s in socks]
    for sock in socks:
        sock.close()
    held = max(ended.values(), default=0.0) if len(ended) == len(socks) else float("inf")
    answers = ", ".join(f"{lines.count(k)} × {k}" for k in sorted(set(lines)))
    closed_after = f"not closed in {BIG_CAP_S:.0f} s" if held == float("inf") else f"{held:.1f} s"
    return (f"{rss[0]:.0f} → {max(rss):.0f} (**{max(rss) - rss[0]:+.0f}**) → {rss_after:.0f} | "
            f"{during} | {answers} | "
            f"{closed_after} | {after} |")


def secs(value: float) -> str:
    return f"not closed in {CAP_S:.0f} s" if value == float("inf") else f"{value:.1f} s"


def fake_upstreams() -> tuple[list[int], list[subprocess.Popen[bytes]]]:
    ups = [free_port(), free_port()]
    return ups, [python(["tests/support/fake_upstream.py", "--port", str(p)]) for p in ups]


def measure(routers: dict[str, tuple[subprocess.Popen[bytes], int]], ups: list[int],
            procs: list[subprocess.Popen[bytes]],
            row: Callable[[int, int], str]) -> list[str]:
    """``| name | row(port, pid)`` for each router, all processes stopped at the end."""
    procs += [proc for proc, _ in routers.values()]
    rows = []
    try:
        for port in [*ups, *(p for _, p in routers.values())]:
            wait_up(f"http://127.0.0.1:{port}/livez" if port not in ups
                    else f"http://127.0.0.1:{port}/health")
        for name, (proc, port) in routers.items():
            rows.append(f"| {name} | {row(port, proc.pid)}")
            print(rows[-1], flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    return rows


def limits_row(port: int, pid: int) -> str:
    rss0, rss1 = huge_heads(port, pid)
    loris, silent = slowloris(port, True), slowloris(port, False)
    status, stalled = stalled_bodies(port)
    return (f"{rss0:.0f} → {rss1:.0f} (**{rss1 - rss0:+.0f}**) | {secs(loris)} | {secs(silent)} | "
            f"{status} | {stalled} |")


def write_part(marker: str, header: str, rows: list[str]) -> None:
    md = MD.read_text() if MD.exists() else ""
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    block = start + "\n" + header + "\n".join(rows) + "\n" + end
    if start not in md:
        md += "\n" + start + "\n" + end + "\n"
    MD.write_text(re.sub(f"{start}.*{end}", lambda _: block, md, flags=re.S))


def when() -> str:
    return (f"Last run: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f}.")


def limits_part(before: str) -> None:
    ups, procs = fake_upstreams()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        rows = measure({f"before ({before})": router(tmp, "before", ups, {}, export(before, tmp)),
                        "after": router(tmp, "after", ups, {"body_timeout_s": 5}, None)},
                       ups, procs, limits_row)
    header = (f"{when()} {HEADS} unfinished heads of {HEAD_BYTES >> 20} MiB, "
              f"{STALLED} stalled bodies, max_concurrency 4; after: defaults (64 KiB head, 10 s "
              f"head timeout) except body_timeout_s 5.\n\n"
              "| router | RSS MiB with unfinished heads | slowloris closed after | silent "
              "connection closed after | ordinary request while bodies stall | stalled bodies: "
              "answer, connection closed |\n|---|---|---|---|---|---|\n")
    write_part("results", header, rows)


def big_part(before: str) -> None:
    ups, procs = fake_upstreams()
    extra = {"max_concurrency": BIG}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        rows = measure({f"before ({before})": router(tmp, "before", ups, extra, export(before, tmp)),
                        "after": router(tmp, "after", ups, extra, None)}, ups, procs, big_bodies)
    header = (f"{when()} {BIG} bodies each stopped after {BIG_BYTES >> 20} MiB, max_concurrency "
              f"{BIG}, every other setting its default (body_timeout_s 60; after: "
              "min_body_bytes_per_s 64 KiB over body_rate_window_s 5 s).\n\n"
              "| router | RSS MiB: before → peak (**added**) → after | ordinary request while "
              "they stall | stalled bodies' answers | last one closed after | ordinary request "
              "after |\n|---|---|---|---|---|---|\n")
    write_part("big-bodies", header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description="router limits before/after")
    parser.add_argument("--before", default="f87c387", help="git revision without the limits")
    parser.add_argument("--before-rate", default="01db474",
                        help="git revision without the body rate floor")
    parser.add_argument("--part", choices=["all", "limits", "big"], default="all")
    args = parser.parse_args()
    if args.part in ("all", "limits"):
        limits_part(args.before)
    if args.part in ("all", "big"):
        big_part(args.before_rate)


if __name__ == "__main__":
    main()
