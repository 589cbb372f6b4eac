"""A command whose extra is not installed says so in one line and exits 4 (abserve.cli.extras).

The base install has no router, load generator or vLLM: ``abserve router`` there meets a
``ModuleNotFoundError`` for one of the service extra's libraries while it runs, and the root
group turns it into "`abserve router` needs the service extra: pip install 'abserve[service]'".
A missing module no extra provides is still an internal error (exit 5). The real thing, in a
venv with the base install only, is tests/integration/test_bare_install.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from abserve.base import exit_codes
from abserve.cli.errors import ContractGroup
from abserve.cli.extras import EXTRA_OF, missing_extra, needs_extra


def app_missing(module: str) -> typer.Typer:
    """A root CLI like abserve's whose ``router`` command cannot import MODULE."""
    app = typer.Typer(name="abserve", cls=ContractGroup, add_completion=False)

    @app.command("router")
    def router() -> None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    @app.command("other")
    def other() -> None:
        pass

    return app


def test_a_missing_service_library_names_the_extra_in_one_line() -> None:
    result = CliRunner().invoke(app_missing("uvicorn"), ["router"])
    assert result.exit_code == exit_codes.USAGE
    assert result.output == "`abserve router` needs the service extra: pip install 'abserve[service]'\n"


def test_a_missing_vllm_library_names_the_cpu_extra() -> None:
    result = CliRunner().invoke(app_missing("torch"), ["router"])
    assert result.exit_code == exit_codes.USAGE
    assert result.output.strip() == "`abserve router` needs the cpu extra: pip install 'abserve[cpu]'"


def test_a_missing_base_library_is_an_internal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    result = CliRunner().invoke(app_missing("yaml"), ["router"])
    assert result.exit_code == exit_codes.CRASH
    assert "internal error: ModuleNotFoundError" in result.output


def test_the_cause_of_an_error_counts_and_submodules_map_to_their_package() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'fastapi.routing'", name="fastapi.routing")
        except ModuleNotFoundError as exc:
            raise RuntimeError("router failed to start") from exc
    except RuntimeError as wrapped:
        assert missing_extra(wrapped) == "service"
    assert missing_extra(ValueError("x")) is None
    assert needs_extra(None, "cpu") == "`abserve` needs the cpu extra: pip install 'abserve[cpu]'"


def test_every_mapped_module_belongs_to_an_extra_of_pyproject() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]
    assert set(EXTRA_OF.values()) <= set(project["optional-dependencies"])
    base = " ".join(project["dependencies"]).lower()
    assert not [module for module in EXTRA_OF if module in base], "a base dependency mapped to an extra"
