"""Store URLs are shown without their password (``abserve.store.urls``), and ``abserve report``'s
"store:" line says where the store is without leaking it (it ran in the compose sign-off's
report container with a PostgreSQL URL and printed the password into the stack's log)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.report.judging import store_location
from abserve.store.urls import shown_url


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql+psycopg://abserve:s3cret-pw@postgres:5432/abserve",
     "postgresql+psycopg://abserve:***@postgres:5432/abserve"),
    ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db"),
    ("sqlite:////runs/x/abserve.db", "sqlite:////runs/x/abserve.db"),
    ("postgresql://nopassword@h/db", "postgresql://nopassword@h/db"),
    ("not a url://user:secret@host", "not a url://***@host"),
])
def test_the_password_is_never_shown(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_reports_store_line_hides_the_password() -> None:
    url = "postgresql+psycopg://abserve:s3cret-pw@postgres:5432/abserve"
    _, _, where = store_location("run-1", url, Path("runs"))
    assert "s3cret-pw" not in where
    assert where.startswith("store: postgresql+psycopg://abserve:***@postgres:5432/abserve")
