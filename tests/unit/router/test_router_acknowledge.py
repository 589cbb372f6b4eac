"""The router's ``acknowledge`` and ``store_fsync`` settings: defaults, the refused pairing with
``client_waits_for: primary``, and what is recorded with the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from abserve.router.settings import RouterSettings


def settings(tmp_path: Path, **extra: Any) -> RouterSettings:
    config: dict[str, Any] = {"arms": {"a": {"url": "http://127.0.0.1:1"},
                                       "b": {"url": "http://127.0.0.1:2"}},
                              "dev_mode": True, "run_dir": tmp_path, **extra}
    return RouterSettings(**config)


def test_acknowledged_means_stored_by_default(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.acknowledge == "stored"
    assert s.store_fsync is False
    config = s.public_config()  # stored with the run: the report reads it
    assert config["acknowledge"] == "stored"
    assert config["store_fsync"] is False


def test_primary_pacing_needs_acknowledging_before_the_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="acknowledge: before_store"):
        settings(tmp_path, client_waits_for="primary")
    fast = settings(tmp_path, client_waits_for="primary", acknowledge="before_store")
    assert fast.public_config()["acknowledge"] == "before_store"
