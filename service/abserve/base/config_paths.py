"""The path fields of an experiment or selftest config, resolved relative to the file naming them.

Applied to each file of an ``extends`` chain before the files are merged
(``abserve.base.yamlfile.read_mapping``'s ``rebase``), so a path means the same wherever abserve is
started from and whichever file of the chain set it. The rules are ``abserve.base.packaged``'s:

- ``policy:`` (and a selftest's ``experiments:``) are config references: relative to the file,
  else to the current directory, else a bare name is the packaged one (``policy: gpu``);
- ``load.profiles[].profile`` that is a path (``my/profile.yaml``) is a traffic reference; a bare
  profile name stays a name (it is a label in the records; ``abserve.traffic.profiles`` finds it);
  a traffic file's ``load.profiles[].file.path`` is relative to the file when it exists there;
- ``model.path`` and an arm's ``python:`` / ``venv:`` are relative to the file when they exist
  there, else as written (relative to the current directory, where abserve builds the tiny model
  and ``install:`` venvs).

Values of the wrong type are left alone for the schema to refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abserve.base.packaged import is_name, resolve_config, resolve_path


def rebase_experiment(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """One experiment file's mapping with its path fields resolved against ``folder``."""
    out = dict(data)
    if isinstance(out.get("policy"), str):
        out["policy"] = str(resolve_config(out["policy"], "policy", folder))
    model = out.get("model")
    if isinstance(model, dict) and isinstance(model.get("path"), str):
        out["model"] = {**model, "path": str(resolve_path(model["path"], folder))}
    arms = out.get("arms")
    if isinstance(arms, dict):
        out["arms"] = {name: _rebase_arm(arm, folder) for name, arm in arms.items()}
    load = out.get("load")
    if isinstance(load, dict) and isinstance(load.get("profiles"), list):
        out["load"] = {**load, "profiles": [_rebase_item(item, folder) for item in load["profiles"]]}
    return out


def rebase_selftest(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A selftest file's mapping with its policies (its own, each check's) and experiment configs
    resolved against ``folder``."""
    out = dict(data)
    if isinstance(out.get("policy"), str):
        out["policy"] = str(resolve_config(out["policy"], "policy", folder))
    experiments = out.get("experiments")
    if isinstance(experiments, dict):
        out["experiments"] = {name: str(resolve_config(ref, "experiment", folder))
                              if isinstance(ref, str) else ref for name, ref in experiments.items()}
    checks = out.get("checks")
    if isinstance(checks, list):  # a check may judge with its own policy
        out["checks"] = [{**c, "policy": str(resolve_config(c["policy"], "policy", folder))}
                         if isinstance(c, dict) and isinstance(c.get("policy"), str) else c for c in checks]
    return out


def _rebase_arm(arm: Any, folder: Path) -> Any:
    if not isinstance(arm, dict):
        return arm
    paths = {key: str(resolve_path(arm[key], folder))
             for key in ("python", "venv") if isinstance(arm.get(key), str)}
    return {**arm, **paths}


def _rebase_item(item: Any, folder: Path) -> Any:
    source = item.get("file") if isinstance(item, dict) else None
    if isinstance(source, dict) and isinstance(source.get("path"), str):  # a traffic file
        trace = source.get("trace")  # a Mooncake trace's tokenizer, relative like the file
        if isinstance(trace, dict) and isinstance(trace.get("tokenizer"), str):
            source = {**source, "trace": {**trace,
                                          "tokenizer": str(resolve_path(trace["tokenizer"], folder))}}
        return {**item, "file": {**source, "path": str(resolve_path(source["path"], folder))}}
    if not isinstance(item, dict) or not isinstance(item.get("profile"), str) or is_name(item["profile"]):
        return item
    return {**item, "profile": str(resolve_config(item["profile"], "traffic", folder))}
