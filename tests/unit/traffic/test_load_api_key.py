"""``abserve load --api-key`` (or ``ABSERVE_API_KEY``): the one key every abserve client takes,
handed to the Locust process (``LoadSpec.api_key``) and never echoed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from abserve.cli import app
from abserve.cli import load as commands
from abserve.traffic import corpus, runner
from abserve.traffic.runner import LoadSpec


def test_help_names_the_option_and_its_variable() -> None:
    out = CliRunner().invoke(app, ["load", "--help"], terminal_width=200).output
    assert "--api-key" in out
    assert "ABSERVE_API_KEY" in out
    assert commands.API_KEY_ENV == corpus.API_KEY_ENV


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--api-key", "from-the-option-123"], {}, "from-the-option-123"),
    ([], {"ABSERVE_API_KEY": "from-the-environment"}, "from-the-environment"),
    (["--api-key", "option-wins-123456"], {"ABSERVE_API_KEY": "env-loses"}, "option-wins-123456"),
    ([], {}, None),
])
def test_the_key_reaches_the_load_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       args: list[str], env: dict[str, str], expected: str | None) -> None:
    seen: list[LoadSpec] = []

    def fake_run_load(spec: LoadSpec) -> Any:
        seen.append(spec)
        raise runner.LoadError("stopped by the test")

    monkeypatch.delenv("ABSERVE_API_KEY", raising=False)
    monkeypatch.setattr(runner, "run_load", fake_run_load)
    result = CliRunner().invoke(app, ["load", "--profile", "multi-image-long-context", "--host",
                                      "http://127.0.0.1:1", "--requests", "1", "--out", str(tmp_path),
                                      *args], env=env)
    [spec] = seen
    assert spec.api_key == expected
    if expected:
        assert expected not in result.output
