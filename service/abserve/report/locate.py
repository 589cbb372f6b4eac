"""Where a run's store and policy are when ``abserve report RUN_ID`` is not told.

Store: every SQLite file under the runs folder (``runs/`` by default, at most four levels deep:
``runs/latest/abserve.db``, ``runs/selftest/<experiment>/abserve.db``) that holds ``RUN_ID`` is a
candidate; each is read through SQLite's read-only mode, so a file that is not an abserve store
is never changed. One candidate is the store; none or several is an error that names them.

Policy, in order: the policy the run recorded as it started (``RunProvenance.policy``: what
every look of ``abserve run`` judged with, arm roles included; ``recorded_policy``); else the
``policy`` block of the ``report.json`` that ``abserve run`` wrote beside the store for this run
(a run recorded before runs kept their policy); else the
policy file whose SHA-256 the run's provenance recorded (``policy_sha256``), looked for under
``configs/`` and then among the packaged configs (``abserve.base.packaged``); else an error asking for
``--policy`` (never a silent default).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from abserve.base.packaged import packaged_root
from abserve.compare import Policy, PolicyError, load_policy
from abserve.model.provenance import RunProvenance
from abserve.store.found import sqlite_files


class LocateError(RuntimeError):
    """The store or the policy of a run cannot be found without being told."""


@dataclass(frozen=True)
class Found:
    """A policy and where it came from (said on the command line)."""

    policy: Policy
    source: str


def _holds(db: Path, run_id: str) -> bool:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            row = conn.execute("SELECT 1 FROM abserve_runs WHERE run_id = ?", (run_id,)).fetchone()
    except sqlite3.Error:
        return False  # not an abserve store (or unreadable): not a candidate
    return row is not None


def find_store(run_id: str, runs: Path) -> Path:
    """The one SQLite store under ``runs`` that holds ``run_id``."""
    if not runs.is_dir():
        raise LocateError(f"no --db given and no runs folder at {runs} to look in; pass --db URL")
    files = sqlite_files(runs)
    hits = [p for p in files if _holds(p, run_id)]
    if not hits:
        raise LocateError(f"no store under {runs} holds run {run_id!r} ({len(files)} SQLite files "
                          "looked at); pass --db URL")
    if len(hits) > 1:
        names = ", ".join(str(p) for p in hits)
        raise LocateError(f"run {run_id!r} is in several stores ({names}); pass --db URL")
    return hits[0]


def _from_report(store: Path, run_id: str) -> Found | None:
    path = store.parent / "report.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("run_id") != run_id or not isinstance(data.get("policy"), dict):
        return None
    try:
        return Found(Policy.model_validate(data["policy"]), f"the run's report {path}")
    except ValueError:
        return None


def recorded_policy(provenance: RunProvenance) -> Found | None:
    """The policy the run recorded as it started, or None (none recorded, or one this abserve
    cannot read: a newer policy's keys)."""
    if provenance.policy is None:
        return None
    try:
        policy = Policy.model_validate(provenance.policy)
    except ValueError:
        return None
    where = f" from {provenance.policy_file}" if provenance.policy_file else ""
    return Found(policy, f"the run's own record (recorded at its start{where})")


def override_note(provenance: RunProvenance) -> str:
    """How a ``--policy`` given on the command line is said: an override of the run's own."""
    own = recorded_policy(provenance)
    return f"--policy, overrides the run's {own.policy.name}" if own else "--policy"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _from_provenance(provenance: RunProvenance, configs: Path) -> Found | None:
    digest = provenance.policy_sha256
    if digest is None:
        return None
    for path in _policy_files(configs):
        if _sha256(path) == digest:
            try:
                return Found(load_policy(path), f"{path} (its SHA-256 is the one the run recorded)")
            except PolicyError:
                continue
    return None


def _policy_files(configs: Path) -> list[Path]:
    """The YAML files under ``configs`` (when it is a folder), then the packaged ones."""
    folders = [configs, packaged_root()] if configs.is_dir() else [packaged_root()]
    return [path for folder in folders for path in sorted(folder.rglob("*.yaml"))]


def find_policy(run_id: str, store: Path | None, provenance: RunProvenance,
                configs: Path = Path("configs")) -> Found:
    """The policy ``run_id`` was judged with (see the module docstring)."""
    found = recorded_policy(provenance)
    found = found or (_from_report(store, run_id) if store is not None else None)
    found = found or _from_provenance(provenance, configs)
    if found is None:
        recorded = provenance.policy_sha256
        hint = (f"its recorded policy SHA-256 {str(recorded)[:12]}… matches no file under {configs} "
                "or among the packaged configs"
                if recorded else "the run records no policy (a by-hand or compose run)")
        raise LocateError(f"cannot tell which policy run {run_id!r} was judged with: {hint}; "
                          "pass --policy FILE")
    return found
