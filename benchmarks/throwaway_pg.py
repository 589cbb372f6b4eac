"""A throwaway PostgreSQL server for benchmarks that run several router workers.

``postgres(base)`` runs ``initdb`` into ``base`` and starts the server on a free loopback
port (``fsync=off``: a benchmark, not a store to keep), as the ``postgres`` system user when
run as root (PostgreSQL refuses root), and stops it on exit. ``create_db`` adds a database.
The tests have their own fixture (``tests/unit/store/conftest.py``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.fake_upstream import free_port


@contextlib.contextmanager
def postgres(base: Path) -> Iterator[str]:
    """A throwaway PostgreSQL server; yields the admin URL prefix (append a database)."""
    bindir = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))[-1]).parent
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses root
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = base / "data", free_port()
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "--no-sync"], check=True, capture_output=True)
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-w",
                    "-l", str(base / "pg.log"), "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                        "stop"], capture_output=True)


def create_db(admin_url: str, name: str) -> str:
    """Create database ``name``; its SQLAlchemy URL."""
    import psycopg

    port = int(admin_url.rsplit(":", 1)[1])
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{admin_url}/{name}"
