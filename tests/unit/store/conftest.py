"""Fixtures of the store tests: a store on each backend (SQLite, and PostgreSQL on the
session's throwaway server, ``pg_server`` from ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.postgres import PgServer

from abserve.store import Store

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
    url = server.create_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    """An open store on each backend; closed after the test."""
    opened = Store.open(backend_url)
    yield opened
    opened.close()
