"""The built wheel of this checkout, for tests that install it outside the checkout.

``build_wheel`` copies the sources a wheel is made of (the package, its configs and the docs the
report packages) into a fresh folder and builds the wheel there, offline, with this interpreter's
setuptools: the checkout's own build folders and caches never leak into it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("pyproject.toml", "README.md", "service", "configs", "docs")  # docs: the glossary


def copy_sources(dest: Path) -> Path:
    """The files a wheel is built from, copied into DEST (symlinks kept: _configs is one)."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def build_wheel(work: Path) -> Path:
    """Build abserve's wheel from a copy of the sources under WORK; return the wheel's path."""
    src = copy_sources(work / "src")
    out = work / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(src)], check=True, capture_output=True, timeout=600)  # busy CI
    return next(out.glob("abserve-*.whl"))
