"""YAML files that extend one another: ``extends: OTHER.yaml`` (relative to the file, or a
packaged name: ``abserve.base.packaged``).

Experiment configs and policies come in families (the CPU default and its A/A' twin differ in
one arm); ``extends`` keeps each number in one file. The named file is read first and the
extending file is applied to it as a merge patch: nested mappings are merged key by key,
anything else (lists included) is replaced whole. A key set to null REMOVES a mapping (an arm:
``b: null``, a whole section) but SETS a scalar to null (``floor: null``, ``max_foreign_share:
null``: "none", as in a file that extends nothing). RFC 7386 removes both, which silently
turned an extending file's "none" back into the model's default (a floor arm ``a2``).
Cycles are refused. Paths a file names are its own: ``rebase`` rewrites each file's path fields
relative to that file before the files are merged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from abserve.base.packaged import Kind, resolve_config

# Rewrites the path fields of one file's mapping, given that file's folder.
Rebase = Callable[[dict[str, Any], Path], dict[str, Any]]


class YamlFileError(ValueError):
    """A file that cannot be read, is not a mapping, or extends itself."""


def read_mapping(path: Path, seen: tuple[Path, ...] = (), kind: Kind = "experiment",
                 rebase: Rebase | None = None) -> dict[str, Any]:
    """The mapping in ``path`` with its ``extends`` chain applied; a bare ``extends`` name is the
    packaged config of ``kind``, and ``rebase`` (when given) rewrites every file's paths."""
    if path.resolve() in seen:
        raise YamlFileError(f"{path} extends itself (through {', '.join(map(str, seen))})")
    try:
        data: object = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise YamlFileError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise YamlFileError(f"{path} must be a YAML mapping at the top level")
    if rebase is not None:
        try:
            data = rebase(data, path.parent)
        except ValueError as exc:
            raise YamlFileError(f"{path}: {exc}") from exc
    base = data.pop("extends", None)
    if base is None:
        return data
    try:
        parent = resolve_config(str(base), kind, relative_to=path.parent)
    except ValueError as exc:
        raise YamlFileError(f"{path}: extends: {exc}") from exc
    return merge(read_mapping(parent, (*seen, path.resolve()), kind, rebase), data)


def extends_chain(path: Path, kind: Kind = "experiment") -> list[Path]:
    """``path`` and each file its ``extends`` chain names, nearest first (what ``read_mapping``
    reads; a file it cannot read, or a cycle, ends the list: ``read_mapping`` reports those)."""
    chain = [path]
    while True:
        try:
            data: object = yaml.safe_load(chain[-1].read_text(encoding="utf-8"))
            base = data.get("extends") if isinstance(data, dict) else None
            parent = None if base is None else resolve_config(str(base), kind, relative_to=chain[-1].parent)
        except (OSError, yaml.YAMLError, ValueError):
            return chain
        if parent is None or parent.resolve() in {p.resolve() for p in chain}:
            return chain
        chain.append(parent)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` applied to ``base`` as a merge patch: null removes a mapping, nulls a scalar."""
    out = dict(base)
    for key, value in override.items():
        old = out.get(key)
        if value is None and isinstance(old, dict):
            out.pop(key)
        elif isinstance(old, dict) and isinstance(value, dict):
            out[key] = merge(old, value)
        else:
            out[key] = value
    return out
