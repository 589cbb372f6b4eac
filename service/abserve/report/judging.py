"""Judging a stored run for a report: open its store, find its policy, judge it.

The library under ``abserve report``, ``abserve plan``, ``abserve watch`` and
``abserve placement-bias`` (their commands live in ``abserve.cli.report``). Without a store URL
the store holding a run is found under ``runs/``; without a policy the policy the run was
judged with is used (``abserve.report.locate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from abserve.compare import Judgment, Policy
    from abserve.compare.plan import Plan
    from abserve.model.records import Exchange
    from abserve.store import Store

DEFAULT_POLICY = Path("configs/policy/default.yaml")


class ReportError(RuntimeError):
    """The report cannot be made: unknown run, missing store or bad policy."""


def open_store(url: str) -> Store:
    """Open an existing store; a SQLite file that does not exist is an error, not a new store."""
    from abserve.store import Store

    if url.startswith("sqlite:///") and not url.endswith(":memory:"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            raise ReportError(f"no store at {path}")
    return Store.open(url)


def read_policy(path: Path) -> Policy:
    """The policy at ``path``; a bad file is a ``ReportError`` naming it."""
    from abserve.compare import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        raise ReportError(str(exc)) from exc


def judge_run(store: Store, run_id: str, policy: Policy) -> Judgment:
    """Read one run and its exchanges from the store and judge them."""
    return judge_with_evidence(store, run_id, policy)[0]


def judge_with_evidence(store: Store, run_id: str, policy: Policy) -> tuple[Judgment, dict[str, Exchange]]:
    """Judge one run; also return the exchanges the report shows side by side (its mismatches)."""
    from abserve.compare.digest import Digester
    from abserve.compare.judge import judge_digest
    from abserve.report.evidence import wanted

    run = store.get_run(run_id)
    if run is None:
        raise ReportError(f"no run {run_id!r} in the store")
    digest = Digester(policy)  # page by page: only digests and the shown mismatches are kept
    digest.feed_raw(store.iter_raw_exchanges(run_id))
    judgment = judge_digest(run, digest, policy)
    return judgment, digest.evidence(wanted(judgment))


def store_location(run_id: str, db: str | None, runs: Path) -> tuple[str, Path | None, str]:
    """The store URL, its SQLite file when it is one, and the "store:" line (no password)."""
    from abserve.report.locate import LocateError, find_store
    from abserve.store.urls import shown_url

    try:
        path = find_store(run_id, runs) if db is None else None
    except LocateError as exc:
        raise ReportError(str(exc)) from exc
    url = db or f"sqlite:///{path}"
    where = f"store: {shown_url(url) if db else path}"
    if path is None and url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
    return url, path, where


def locate(run_id: str, db: str | None, policy: Path | None, runs: Path) -> tuple[str, Policy, str]:
    """The store URL, the policy and a line saying where both came from: ``--policy`` (said to
    override the run's own when it recorded one), else the run's (``abserve.report.locate``)."""
    from abserve.report.locate import LocateError, find_policy, override_note

    url, path, where = store_location(run_id, db, runs)
    with open_store(url) as store:
        run = store.get_run(run_id)
    if run is None:
        raise ReportError(f"no run {run_id!r} in the store")
    if policy is not None:
        return url, read_policy(policy), f"{where}; policy: {policy} ({override_note(run.provenance)})"
    try:
        found = find_policy(run_id, path, run.provenance)
    except LocateError as exc:
        raise ReportError(str(exc)) from exc
    return url, found.policy, f"{where}; policy: {found.policy.name} from {found.source}"


def judged_by() -> dict[str, str | None]:
    """The abserve version that made this report (the run's own provenance says what ran)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {"abserve_version": version("abserve")}
    except PackageNotFoundError:
        return {"abserve_version": None}


def make_plan(db: str, run_id: str, policy: Policy, **kwargs: object) -> Plan:
    """Plan a run from the pilot ``run_id`` in the store (see ``abserve.compare.plan.plan``)."""
    from abserve.compare.plan import plan

    with open_store(db) as store:
        if store.get_run(run_id) is None:
            raise ReportError(f"no run {run_id!r} in the store")
        exchanges = list(store.iter_exchanges(run_id))
    try:
        return plan(exchanges, policy, **kwargs)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ReportError(str(exc)) from exc
