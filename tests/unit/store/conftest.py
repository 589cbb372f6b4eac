"""Fixtures of the store tests: a throwaway PostgreSQL server, and a store on each backend.

PostgreSQL comes from the distribution's packages (``scripts/setup.sh`` installs them). The
session fixture runs ``initdb`` into a fresh temporary directory, starts ``postgres`` on a
free loopback port with its unix socket in that directory, and stops it by PID at the end.
PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` system
user and the directory is handed to it. Missing binaries FAIL the tests (never skip).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from abserve.store import Store


@dataclass(frozen=True)
class PgServer:
    port: int
    pid: int

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        )


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    if not found:
        pytest.fail("PostgreSQL server binaries not found: run scripts/setup.sh (installs them)")
    return Path(found[-1]).parent


def _major(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(base: Path) -> list[str]:
    """The command prefix that runs PostgreSQL as an unprivileged user (chowns ``base``)."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("running as root and no 'postgres' system user exists to run PostgreSQL")
    os.chown(base, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


def _wait_ready(server: PgServer, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"postgres exited early:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with server.admin():
                return
        except psycopg.OperationalError:
            time.sleep(0.1)
    pytest.fail(f"postgres not ready within 60 s:\n{log.read_text(errors='replace')[-2000:]}")


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


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = _bindir()
    base = Path(tempfile.mkdtemp(prefix="abserve-pg-"))
    try:
        prefix = _as_server_user(base)
        data, log = base / "data", base / "server.log"
        subprocess.run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True,
        )  # fmt: skip
        port = _free_port()
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(
                [*prefix, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                 "-k", str(base), "-c", "listen_addresses=127.0.0.1",
                 "-c", "fsync=off", "-c", "full_page_writes=off"],
                stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip
        server = PgServer(port=port, pid=proc.pid)
        try:
            _wait_ready(server, proc, log)
            server = PgServer(port=port, pid=_postmaster_pid(data, proc.pid))
            yield server
        finally:
            _stop(_postmaster_pid(data, proc.pid), proc)
    finally:
        shutil.rmtree(base, ignore_errors=True)


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``database_url`` for each backend in turn (parametrizes the test)."""
    yield from _url_for(request, tmp_path, request.param)


def _url_for(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'records.db'}"
        return
    server: PgServer = request.getfixturevalue("pg_server")
    dbname = f"t_{uuid.uuid4().hex[:12]}"
    with server.admin() as conn:
        conn.execute(f'CREATE DATABASE "{dbname}" STRATEGY FILE_COPY')
    yield server.url(dbname)
    with server.admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    """An open store on each backend; closed after the test."""
    opened = Store.open(backend_url)
    yield opened
    opened.close()
