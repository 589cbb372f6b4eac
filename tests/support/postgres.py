"""A throwaway PostgreSQL server from the distribution's binaries, for tests and benchmarks.

``throwaway_postgres()`` runs ``initdb`` into a fresh temporary directory, starts ``postgres``
on a free loopback port with its unix socket in that directory (``fsync=off``: a server to
throw away, not a store to keep), and stops it by PID on exit. PostgreSQL refuses to run as
root, so as root the server runs as the ``postgres`` system user and the directory is handed
to it. ``PgServer.create_database`` adds a database and gives its SQLAlchemy URL.

This is the one implementation: the store tests' session fixture (``pg_server``, registered
for every test by ``tests/conftest.py``) and the benchmarks that need PostgreSQL both use it.
A missing binary raises ``PostgresUnavailable`` with the one line that says what to do; the
fixture turns it into a test failure (never a skip).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from tests.support.fake_upstream import free_port

READY_SECONDS = 60


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server cannot be started here (binaries or system user missing)."""


@dataclass(frozen=True)
class PgServer:
    """A running throwaway server: its port and its postmaster's PID."""

    port: int
    pid: int

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        )

    def create_database(self, name: str | None = None) -> str:
        """Create database ``name`` (a fresh unique one by default); its SQLAlchemy URL."""
        dbname = name or f"t_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{dbname}" STRATEGY FILE_COPY')
        return self.url(dbname)

    def drop_database(self, url: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    if not found:
        raise PostgresUnavailable("PostgreSQL server binaries not found: "
                                  "run scripts/setup.sh (installs them)")
    return Path(found[-1]).parent


def _major(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _as_server_user(base: Path) -> list[str]:
    """The command prefix that runs PostgreSQL as an unprivileged user (chowns ``base``)."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable(
            "running as root and no 'postgres' system user exists to run PostgreSQL: "
            "run scripts/setup.sh (installs the server package, which creates it)"
        ) from None
    os.chown(base, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


def _wait_ready(server: PgServer, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PostgresUnavailable(f"postgres exited early:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with server.admin():
                return
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise PostgresUnavailable(f"postgres not ready within {READY_SECONDS} s:\n"
                              f"{log.read_text(errors='replace')[-2000:]}")


def _postmaster_pid(data: Path, fallback: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((data / "postmaster.pid").read_text().splitlines()[0])
    return fallback


def _stop(pid: int, proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)  # "fast" shutdown
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _start(bindir: Path, base: Path, prefix: list[str],
           max_connections: int) -> tuple[subprocess.Popen[bytes], int]:
    data, log = base / "data", base / "server.log"
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
         "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [*prefix, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
             "-k", str(base), "-c", "listen_addresses=127.0.0.1", "-c", f"max_connections={max_connections}",
             "-c", "fsync=off", "-c", "full_page_writes=off"],
            stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc, port


@contextlib.contextmanager
def throwaway_postgres(max_connections: int = 200) -> Iterator[PgServer]:
    """A PostgreSQL server for the duration of the block, then stopped and its files removed."""
    bindir = _bindir()
    base = Path(tempfile.mkdtemp(prefix="abserve-pg-"))
    try:
        proc, port = _start(bindir, base, _as_server_user(base), max_connections)
        data = base / "data"
        try:
            _wait_ready(PgServer(port=port, pid=proc.pid), proc, base / "server.log")
            yield PgServer(port=port, pid=_postmaster_pid(data, proc.pid))
        finally:
            _stop(_postmaster_pid(data, proc.pid), proc)
    finally:
        shutil.rmtree(base, ignore_errors=True)
