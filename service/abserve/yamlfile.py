"""YAML files that extend one another: ``extends: OTHER.yaml`` (relative to the file).

Experiment configs and policies come in families (the CPU default and its A/A' twin differ in
one arm); ``extends`` keeps each number in one file. The named file is read first and the
extending file is applied to it as a JSON Merge Patch (RFC 7386): nested mappings are merged
key by key, a key set to null is removed, anything else (lists included) is replaced whole.
Cycles are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class YamlFileError(ValueError):
    """A file that cannot be read, is not a mapping, or extends itself."""


def read_mapping(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The mapping in ``path`` with its ``extends`` chain applied."""
    if path.resolve() in seen:
        raise YamlFileError(f"{path} extends itself (through {', '.join(map(str, seen))})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise YamlFileError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise YamlFileError(f"{path} must be a YAML mapping at the top level")
    base = data.pop("extends", None)
    if base is None:
        return data
    return merge(read_mapping(path.parent / str(base), (*seen, path.resolve())), data)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` applied to ``base`` as a merge patch (RFC 7386)."""
    out = dict(base)
    for key, value in override.items():
        old = out.get(key)
        if value is None:
            out.pop(key, None)
        elif isinstance(old, dict) and isinstance(value, dict):
            out[key] = merge(old, value)
        else:
            out[key] = value
    return out
