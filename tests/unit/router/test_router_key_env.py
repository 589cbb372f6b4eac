"""One key story: the router reads ABSERVE_API_KEY, the variable `abserve load` and every abserve
client read; ABSERVE_ROUTER_API_KEY wins when both are set; a YAML api_key still works."""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.cli.load import API_KEY_ENV
from abserve.router.settings import SettingsError, load_settings

ARMS = 'arms:\n  a: {url: "http://127.0.0.1:1"}\n  b: {url: "http://127.0.0.1:2"}\n'


def _file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "router.yaml"
    path.write_text(ARMS + extra)
    return path


def _key(tmp_path: Path, extra: str = "") -> str:
    settings = load_settings(_file(tmp_path, extra))
    assert settings.api_key is not None
    return settings.api_key.get_secret_value()


def test_the_clients_variable_is_the_routers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert API_KEY_ENV == "ABSERVE_API_KEY"
    monkeypatch.delenv("ABSERVE_ROUTER_API_KEY", raising=False)
    monkeypatch.setenv(API_KEY_ENV, "shared-key-0123456789")
    assert _key(tmp_path) == "shared-key-0123456789"


def test_the_routers_own_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "shared-key-0123456789")
    monkeypatch.setenv("ABSERVE_ROUTER_API_KEY", "router-key-0123456789")
    assert _key(tmp_path, 'api_key: "yaml-key-0123456789"\n') == "router-key-0123456789"


def test_a_yaml_key_works_without_either_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.delenv("ABSERVE_ROUTER_API_KEY", raising=False)
    assert _key(tmp_path, 'api_key: "yaml-key-0123456789"\n') == "yaml-key-0123456789"
    with pytest.raises(SettingsError, match="api_key is required"):
        load_settings(_file(tmp_path))
    with pytest.raises(SettingsError, match="apikey: Extra inputs are not permitted"):
        load_settings(_file(tmp_path, 'apikey: "yaml-key-0123456789"\n'))
