"""What changed since a config's last accepted release: the ledger site's comparison page, as a
pure function of the config's sign-offs and its accepted builds.

The latest sign-off of the config (its newest entry) against the newest ``AcceptedBuild``: the
candidate build each ran, field by field (vLLM version, image and digest, install spec, git
SHA, lookup, proof, server arguments), the server flags added and removed, and every gate's
effect side by side with the accepted run's own sign-off when the ledger still holds it. With no
accepted release the page says how to accept one and shows the latest build alone. Server
arguments are compared as flags with their values (``abserve.model.server_flags``), less those
whose values are the run's (host, the random port, model path, API key): a port is no change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from abserve.ledger.entry import AcceptedBuild, ArmBuild, GateEffect, LedgerEntry
from abserve.ledger.site_data import SignOff
from abserve.ledger.site_views import build_label, effect_text, equality_text, when
from abserve.model.server_flags import server_flags

FIELDS: tuple[tuple[str, str], ...] = (
    ("vLLM version", "vllm_version"), ("image", "image"), ("image digest", "image_digest"),
    ("install", "install"), ("python", "python"), ("git SHA", "git_sha"), ("lookup", "lookup"),
    ("proof", "proof"), ("server arguments", "server_args"),
    ("flags that differ from its baseline", "flags_differ"),
)


@dataclass(frozen=True)
class FieldRow:
    """One field of the two builds."""

    label: str
    accepted: str
    latest: str
    changed: bool


@dataclass(frozen=True)
class EffectRow:
    """One gate, accepted release's sign-off beside the latest one."""

    gate: str
    critical: bool
    accepted: str
    latest: str
    changed: bool  # the outcome differs


@dataclass(frozen=True)
class ChangedPage:
    """The what-changed page of one config."""

    config: str
    latest: SignOff
    latest_report: str | None
    accepted: AcceptedBuild | None
    accepted_report: str | None
    accepted_in_ledger: bool
    same_run: bool
    fields: list[FieldRow]
    flags_added: list[str] = field(default_factory=list)
    flags_removed: list[str] = field(default_factory=list)
    effects: list[EffectRow] = field(default_factory=list)
    verdicts: tuple[str, str] = ("", "")
    equality: tuple[str, str] = ("", "")
    judged_against: str = ""
    trend_page: str = ""


def _value(build: ArmBuild | None, attr: str) -> str:
    if build is None:
        return ""
    value = getattr(build, attr)
    if attr == "server_args":
        return " ".join(server_flags(value))
    if isinstance(value, list):
        return " ".join(value)
    return "" if value is None else str(value)


def field_rows(accepted: ArmBuild | None, latest: ArmBuild | None) -> list[FieldRow]:
    """Each build field of the accepted and the latest candidate, and whether it changed."""
    rows = []
    for label, attr in FIELDS:
        a, b = _value(accepted, attr), _value(latest, attr)
        if a or b:
            rows.append(FieldRow(label, a or "-", b or "-", accepted is not None and a != b))
    return rows


def effect_rows(accepted: LedgerEntry | None, latest: LedgerEntry) -> list[EffectRow]:
    """Every gate of either sign-off, critical first, in the latest one's order."""
    theirs: dict[str, GateEffect] = {g.name: g for g in accepted.gates} if accepted else {}
    mine = {g.name: g for g in latest.gates}
    names = [*mine, *(n for n in theirs if n not in mine)]
    critical = {n: (mine.get(n) or theirs[n]).critical for n in names}
    rows = []
    for name in sorted(names, key=lambda n: not critical[n]):
        a, b = theirs.get(name), mine.get(name)
        changed = accepted is not None and (a.outcome if a else None) != (b.outcome if b else None)
        rows.append(EffectRow(name, critical[name], effect_text(a) if a else "-",
                              effect_text(b) if b else "-", changed))
    return rows


def changed_page(config: str, signoffs: Sequence[SignOff], accepted: Sequence[AcceptedBuild],
                 entries: Mapping[str, LedgerEntry],
                 reports: Mapping[str, tuple[str | None, str | None]], trend_page: str) -> ChangedPage:
    """The page of ``config``: its latest sign-off (``signoffs`` newest first, each with an
    entry) against its newest accepted build (``accepted`` newest first); ``entries``: every
    entry of the ledger by run id (the accepted run's own sign-off, when still there)."""
    latest = signoffs[0]
    assert latest.entry is not None
    last = next((a for a in accepted if a.config_name == config), None)
    theirs = entries.get(last.run_id) if last else None
    cand = latest.entry.arm("candidate") or (latest.entry.arms[-1] if latest.entry.arms else None)
    build = last.build if last else None
    old = set(server_flags(build.server_args)) if build else set()
    new = set(server_flags(cand.server_args)) if cand else set()
    base = latest.entry.arm("baseline")
    against = (f"judged against accepted run {latest.entry.accepted_from}" if latest.entry.accepted_from
               else f"judged against its config's baseline arm ({build_label(base)})" if base else "")
    return ChangedPage(
        config=config, latest=latest, latest_report=reports.get(latest.run_id, (None, None))[0],
        accepted=last, accepted_report=reports.get(last.run_id, (None, None))[0] if last else None,
        accepted_in_ledger=theirs is not None, same_run=last is not None and last.run_id == latest.run_id,
        fields=field_rows(build, cand),
        flags_added=sorted(new - old) if last else [], flags_removed=sorted(old - new) if last else [],
        effects=effect_rows(theirs, latest.entry),
        verdicts=(theirs.verdict if theirs else "", latest.entry.verdict),
        equality=(equality_text(theirs) if theirs else "", equality_text(latest.entry)),
        judged_against=against, trend_page=trend_page,
    )


def accepted_line(a: AcceptedBuild) -> str:
    """``v0.32 (run rc-7, arm b, accepted 2026-12-06 07:36 UTC)``."""
    return f"{a.name} (run {a.run_id}, arm {a.arm}, accepted {when(a.accepted_at)})"
