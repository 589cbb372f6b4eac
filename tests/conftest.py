"""Fixtures every test folder may use: the throwaway PostgreSQL server (``pg_server``).

A session-scoped server is started only by the first test that asks for it. The plugin
``tests.support.heavy_marks`` fails any test that starts a process or a server without the
marker saying so (``make test-fast`` selects by marker); ``tests.support.fast_examples`` runs
fewer hypothesis examples where ``make test-fast`` asks for it (``make test`` runs them all);
``tests.support.slow_modules`` keeps ``make test-fast`` from importing modules marked slow.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.postgres import PgServer, PostgresUnavailable, throwaway_postgres

pytest_plugins = ("tests.support.heavy_marks", "tests.support.fast_examples", "tests.support.slow_modules",
                  "pytester")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the session; a missing binary fails the test (never skips)."""
    try:
        with throwaway_postgres() as server:
            yield server
    except PostgresUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh database on the session's server, dropped after the test."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)
