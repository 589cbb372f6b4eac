"""The configs that ship inside the package, and how a reference to a config resolves.

The repository's ``configs/`` (experiment configs, ``policy/``, ``traffic/``, ``selftest/``) is
the package data ``abserve/_configs`` (a symlink in the checkout, copied into the wheel), so an
installed abserve works from any directory: ``abserve check cpu-default``, ``--policy gpu``,
``policy: cpu-default`` in a config, ``profile: many-items``.

A reference resolves by these rules (``resolve_config``):

1. an absolute path is itself;
2. a relative path that exists relative to the base (the folder of the config that names it;
   the current directory on the command line) is that file;
3. in a config, a relative path that exists relative to the current directory is that file
   (backward compatibility: configs written for the repository root);
4. a relative path under ``configs/`` (the package data's name in the repository, as the
   repository's own configs write it: ``configs/policy/gpu.yaml``) is the packaged file;
5. a bare name (no ``/``, no ``.yaml``/``.yml``) is the packaged config of its kind
   (``policy`` names live in ``policy/``, ``traffic`` names in ``traffic/``); an unknown name
   is an error listing the known ones;
6. a plain file name (no ``/``, ending in ``.yaml``/``.yml``) found by none of the rules above
   is the packaged config of its stem, when there is one: ``extends: gpu-qwen2.5-vl-3b.yaml`` in
   a copy under ``configs/local/`` is the shipped config, as ``extends: gpu-qwen2.5-vl-3b`` is;
7. anything else is the path relative to the base, left for the reader to report as missing.

Other path fields of a config (``model.path``, an arm's ``python:`` and ``venv:``) follow
``resolve_path``: relative to the config when the file exists there, else as written, relative to
the current directory, which is where abserve writes what it builds (the tiny model,
``install:`` venvs).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

Kind = Literal["experiment", "policy", "traffic"]  # experiment: the top folder (selftest.yaml too)
SUFFIXES = (".yaml", ".yml")
REPO_FOLDER = "configs"  # the package data's folder in the repository
FOLDER: dict[Kind, str] = {"experiment": "", "policy": "policy", "traffic": "traffic"}


class PackagedError(ValueError):
    """A bare name that names no packaged config of its kind."""


def packaged_root() -> Path:
    """The folder of the packaged configs (``abserve/_configs``; installs on a file system)."""
    return Path(str(files("abserve").joinpath("_configs")))


def is_name(ref: str | Path) -> bool:
    """Whether ``ref`` is a bare name (``cpu-default``), not a path (``x/y``, ``cpu-default.yaml``)."""
    text = str(ref)
    return bool(text) and "/" not in text and not text.endswith(SUFFIXES) and text not in (".", "..")


def available(kind: Kind) -> list[str]:
    """The packaged names of one kind, sorted."""
    return sorted(p.stem for p in (packaged_root() / FOLDER[kind]).glob("*.yaml"))


def packaged(name: str, kind: Kind) -> Path:
    """The packaged config ``name`` of ``kind``; ``PackagedError`` names the known ones."""
    path = packaged_root() / FOLDER[kind] / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(available(kind)) or "none"
        raise PackagedError(f"no packaged {kind} config named {name!r} (known: {known})")
    return path


def resolve_config(ref: str | Path, kind: Kind = "experiment", relative_to: Path | None = None) -> Path:
    """The file a config reference names (the module docstring's rules); ``relative_to`` is the
    folder of the config that holds the reference, ``None`` on the command line."""
    path = Path(ref).expanduser()
    if path.is_absolute():
        return path
    here = relative_to / path if relative_to is not None else path
    if here.exists():
        return here
    if relative_to is not None and path.exists():
        return path
    shipped = packaged_root().joinpath(*path.parts[1:]) if path.parts[:1] == (REPO_FOLDER,) else None
    if shipped is not None and shipped.exists():
        return shipped
    if is_name(path):
        return packaged(str(path), kind)
    stem = file_name_stem(path)
    if stem is not None and stem in available(kind):
        return packaged(stem, kind)
    return here


def file_name_stem(ref: str | Path) -> str | None:
    """The stem of a plain file name (``gpu.yaml``: ``gpu``); ``None`` for a path or a bare name."""
    text = str(ref)
    if "/" in text or not text.endswith(SUFFIXES):
        return None
    stem = text.removesuffix(".yaml").removesuffix(".yml")
    return stem if is_name(stem) else None


def resolve_path(ref: str | Path, relative_to: Path) -> Path:
    """A path field of a config: relative to ``relative_to`` when it exists there, else as written."""
    path = Path(ref).expanduser()
    if path.is_absolute():
        return path
    here = relative_to / path
    return here if here.exists() else path
