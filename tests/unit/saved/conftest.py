"""Where the recorded fixtures are (tests/fixtures/saved/README.md says how each was made)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "saved"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
