"""The layers contract (``.importlinter``) is what ``make lint`` enforces, and it bites.

A copy of the package gains an import from a lower layer to a higher one, or a cycle between
two modules of one layer (under ``TYPE_CHECKING`` too): the Makefile's own ``lint-imports``
command then fails naming the broken contract, while the untouched copy passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def lint_imports_command() -> list[str]:
    """The ``lint-imports`` line of the Makefile's ``lint`` recipe, as arguments."""
    recipe = REPO.joinpath("Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    line = next(row.strip() for row in recipe.splitlines() if "lint-imports" in row)
    program, *args = line.split()
    return [str(BIN / Path(program).name), *args]


def package_copy(tmp: Path) -> Path:
    """The repository's package and contract file, copied where they can be broken."""
    shutil.copytree(REPO / "service" / "abserve", tmp / "service" / "abserve",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp / ".importlinter")
    return tmp


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "service")}
    return subprocess.run(lint_imports_command(), cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def append(root: Path, module: str, text: str) -> None:
    path = root / "service" / Path(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + text)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package_copy(tmp_path_factory.mktemp("pristine"))


@pytest.mark.process
def test_the_package_as_it_is_keeps_every_contract(pristine: Path) -> None:
    result = lint(pristine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.process
def test_an_upward_import_fails_lint(tmp_path: Path) -> None:
    root = package_copy(tmp_path)
    append(root, "abserve.model.roles", "\nfrom abserve.report import judging  # noqa: E402,F401\n")
    result = lint(root)
    assert result.returncode != 0
    assert "Layers, from the command line down to the record model BROKEN" in result.stdout
    assert "abserve.model.roles -> abserve.report.judging" in result.stdout


@pytest.mark.process
def test_a_cycle_under_type_checking_fails_lint(tmp_path: Path) -> None:
    root = package_copy(tmp_path)
    append(root, "abserve.model.roles", "\nfrom typing import TYPE_CHECKING  # noqa: E402\n"
           "if TYPE_CHECKING:\n    from abserve.model import arms  # noqa: F401\n")
    result = lint(root)
    assert result.returncode != 0
    assert "No import cycles between modules or packages BROKEN" in result.stdout
