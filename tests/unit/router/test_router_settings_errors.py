"""``abserve router --config`` refuses bad settings in one line that never quotes a secret
(pydantic's own message quotes the input: the API key, a database URL's password)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from abserve.cli import app

KEY = "zq" + "Q7xv93LmT2pa" * 2 + "Wk"
PASSWORD = "hunter2-db-password"
DB_URL = f"postgres://u:{PASSWORD}@h/d"
ARMS = {"a": {"url": "http://127.0.0.1:1"}, "b": {"url": "http://127.0.0.1:2"}}


def leaked(out: str) -> list[str]:
    """Every 6-character piece of the key or the password that ``out`` shows."""
    return [s[i:i + 6] for s in (KEY, PASSWORD) for i in range(len(s) - 5) if s[i:i + 6] in out]


def run_router(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    path = tmp_path / "router.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["router", "--config", str(path)], env=env)
    assert result.exit_code == 4, result.output
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "invalid settings" in out
    assert "Traceback" not in out
    return out


CASES: list[dict[str, Any]] = [
    {"arms": ARMS, "primary": "z", "api_key": KEY, "database_url": DB_URL},  # bad primary
    {"arms": ARMS, "api_key": KEY[:12], "database_url": DB_URL},  # key too short
    {"arms": ARMS, "api_key": KEY, "databse_url": DB_URL},  # misspelled: extra field
    {"arms": ARMS, "api_key": KEY, "database_url": DB_URL, "max_images": "many"},
    {"arms": {"a": {"url": "ftp://h", "api_key": KEY}}, "dev_mode": True},
    {"router": {"arms": ARMS, "api_key": KEY, "seeded_sampling": PASSWORD}},
    {"arms": {"a": {"url": f"http://arm:{PASSWORD}@127.0.0.1:1"}}, "dev_mode": True},
]


@pytest.mark.parametrize("config", CASES)
def test_refused_settings_never_print_a_secret(tmp_path: Path, config: dict[str, Any]) -> None:
    assert not leaked(run_router(tmp_path, yaml.safe_dump(config)))


def test_a_short_key_from_the_environment_is_not_printed(tmp_path: Path) -> None:
    out = run_router(tmp_path, yaml.safe_dump({"arms": ARMS}),
                     env={"ABSERVE_ROUTER_API_KEY": KEY[:12]})
    assert "api_key" in out
    assert not leaked(out)


def test_yaml_errors_give_the_position_not_the_line(tmp_path: Path) -> None:
    out = run_router(tmp_path, f"arms: {{}}\napi_key: '{KEY}\ndatabase_url: [{DB_URL}\n")
    assert "not valid YAML" in out
    assert "line" in out
    assert not leaked(out)


def test_the_message_still_says_what_is_wrong(tmp_path: Path) -> None:
    out = run_router(tmp_path, yaml.safe_dump(CASES[2]))
    assert "databse_url" in out
    assert "not permitted" in out.lower()
    out = run_router(tmp_path, yaml.safe_dump(CASES[0]))
    assert "primary arm is not among arms" in out


def test_an_arm_url_with_credentials_is_refused(tmp_path: Path) -> None:
    out = run_router(tmp_path, yaml.safe_dump(CASES[-1]))
    assert "must not hold credentials" in out
    assert not leaked(out)
