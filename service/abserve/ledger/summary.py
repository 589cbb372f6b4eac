"""A sign-off as a ledger entry: the ``Judgment`` and its run summed up in ``LedgerEntry``.

Pure: everything comes from the judgment (verdict, gates, equality, neighbours), the run as
stored (each arm's provenance and configuration, the config's name and hash, the machine) and
the environment given (CI variables of GitHub Actions and GitLab CI; only the commit, branch,
pipeline URL and pull-request number are read, never a token). ``abserve.ledger.book`` writes
the entry; ``abserve.ledger.signoff.build_report`` calls both whenever it writes a report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from abserve.compare.family import FamilyJudgment
from abserve.compare.model import Judgment
from abserve.ledger.entry import ArmBuild, CIFacts, EqualityFacts, GateEffect, LedgerEntry, MachineFacts
from abserve.model.records import ArmProvenance, RunInfo
from abserve.model.server_flags import server_flags

_SHA_IN_INSTALL = re.compile(r"@([0-9a-f]{7,40})\b|\b([0-9a-f]{40})\b")
_SHA_IN_VERSION = re.compile(r"\+g([0-9a-f]{7,40})\b")  # setuptools-scm: 0.6.4.dev12+g1a2b3c4
_PULL_REF = re.compile(r"^refs/pull/(\d+)/")


def entry_from_judgment(judgment: Judgment, run: RunInfo, report_dir: Path | None,
                        environ: Mapping[str, str], now: float) -> LedgerEntry:
    """The ledger entry of a sign-off: ``judgment`` of ``run``, reported into ``report_dir`` at
    ``now`` (Unix time), under the CI facts of ``environ``."""
    prov = run.provenance
    accepted = prov.accepted_baseline or {}
    ended = judgment.ended_at if judgment.ended_at is not None else run.ended_at
    return LedgerEntry(
        run_id=judgment.run_id,
        recorded_at=now,
        started_at=judgment.started_at,
        duration_s=None if ended is None else max(0.0, ended - judgment.started_at),
        config_name=prov.experiment,
        config_sha256=prov.config_sha256,
        verdict=judgment.verdict,
        exit_code=judgment.exit_code,
        reasons=list(judgment.reasons),
        requests=judgment.exchanges_judged,
        exchanges_total=judgment.exchanges_total,
        arms=arm_builds(judgment, run),
        gates=gate_effects(judgment),
        equality=equality_facts(judgment),
        machine=machine_facts(run, judgment),
        ci=ci_facts(environ),
        report_dir=None if report_dir is None else str(report_dir.resolve()),
        accepted_from=_text(accepted.get("run_id")),
        accepted_name=_text(accepted.get("name")),
    )


def family_entry(family: FamilyJudgment, run: RunInfo, report_dir: Path | None,
                 environ: Mapping[str, str], now: float) -> LedgerEntry:
    """The entry of a sign-off with several candidates (``abserve.compare.family``): the family's
    verdict, every candidate's build, and each candidate's gates named ``<arm>/<gate>``; the
    equality of the candidate with the most mismatches."""
    entries = {name: entry_from_judgment(family.judgments[name], run, report_dir, environ, now)
               for name in family.candidates if name in family.judgments}
    if not entries:
        raise ValueError(f"run {run.run_id!r}: the family judgment holds no candidate's judgment")
    first = next(iter(entries.values()))
    builds = {b.name: b for b in first.arms if b.role != "candidate"}
    builds |= {name: next(a for a in entry.arms if a.name == name) for name, entry in entries.items()}
    gates = [g.model_copy(update={"name": f"{name}/{g.name}"})
             for name, entry in entries.items() for g in entry.gates]
    worst = max(entries.values(), key=lambda e: e.equality.mismatches)
    return first.model_copy(update={
        "verdict": family.verdict, "exit_code": family.exit_code, "reasons": list(family.reasons),
        "arms": sorted(builds.values(), key=_arm_order),
        "gates": sorted(gates, key=lambda g: not g.critical), "equality": worst.equality})


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def arm_builds(judgment: Judgment, run: RunInfo) -> list[ArmBuild]:
    """Each arm's build, the baseline first; each says the flags it has that the baseline lacks."""
    builds = [arm_build(name, judgment, run) for name in judgment.arms]
    base = next((b for b in builds if b.role == "baseline"), None)
    if base is not None:
        base_flags = _flags(base.server_args) | _env_flags(run.arms.get(base.name))
        for build in builds:
            if build is not base:
                mine = _flags(build.server_args) | _env_flags(run.arms.get(build.name))
                build.flags_differ = sorted(mine - base_flags)
    return sorted(builds, key=_arm_order)


def _arm_order(build: ArmBuild) -> tuple[bool, bool, str]:
    """The baseline first, then the candidates, then the others (floors), by name."""
    return build.role != "baseline", build.role != "candidate", build.name


def arm_build(name: str, judgment: Judgment, run: RunInfo) -> ArmBuild:
    """One arm's build from its summary, its provenance and its configuration as recorded."""
    summary, prov = judgment.arms[name], run.arms.get(name)
    configured = run.provenance.arm_configs.get(name, {})
    install = [str(r) for r in configured.get("install", []) if isinstance(r, str)]
    image, digest = split_image(prov.image if prov and prov.image else _text(configured.get("image")))
    version = summary.vllm_version or (prov.vllm_version if prov else None)
    return ArmBuild(
        name=name,
        role=summary.role,
        kind=prov.kind if prov else str(configured.get("kind", "managed")),
        vllm_version=version,
        image=image,
        image_digest=digest,
        install=install,
        python=(prov.python if prov else None) or _configured_python(configured),
        git_sha=git_sha(install, version),
        lookup=summary.proven_lookup,
        proof=prov.proof_state if prov else "unproven",
        server_args=list(summary.server_args),
    )


def _configured_python(configured: Mapping[str, object]) -> str | None:
    if configured.get("python"):
        return str(configured["python"])
    return f"{configured['venv']}/bin/python" if configured.get("venv") else None


def split_image(image: str | None) -> tuple[str | None, str | None]:
    """``ref@sha256:id`` (as ``scripts/signoff.sh`` records it) as (reference, digest)."""
    if not image:
        return None, None
    ref, at, digest = image.rpartition("@")
    if at and digest.startswith("sha256:"):
        return ref, digest
    return image, None


def git_sha(install: list[str], vllm_version: str | None) -> str | None:
    """The git commit an arm's build names: a ``git+...@SHA`` or bare SHA among its install
    requirements, else the ``+gSHA`` of a development version of vLLM; None where it does not know."""
    for requirement in install:
        if match := _SHA_IN_INSTALL.search(requirement):
            return match.group(1) or match.group(2)
    if vllm_version and (match := _SHA_IN_VERSION.search(vllm_version)):
        return match.group(1)
    return None


def _flags(argv: list[str]) -> set[str]:
    """A server command line as ``--flag value`` items, less the per-run ones (host, port...)."""
    return set(server_flags(argv))


def _env_flags(prov: ArmProvenance | None) -> set[str]:
    return {f"{key}={value}" for key, value in (prov.server_env if prov else {}).items()}


def gate_effects(judgment: Judgment) -> list[GateEffect]:
    """Each latency gate's effect, interval and allowance, the critical gates first."""
    gates = [GateEffect(name=m.name, metric=m.metric, critical=m.critical, outcome=m.outcome,
                        estimate=m.estimate, low=m.low, high=m.high, relative=m.relative,
                        threshold=m.threshold, baseline_value=m.baseline_value)
             for m in judgment.metrics]
    return sorted(gates, key=lambda g: not g.critical)


def equality_facts(judgment: Judgment) -> EqualityFacts:
    """Mismatches of the baseline-candidate pair and the bound on the candidate's rate."""
    verdict, lines = judgment.equality_verdict, judgment.equality
    if verdict is None:
        return EqualityFacts()
    main = lines[0] if lines else None
    return EqualityFacts(
        outcome=verdict.outcome,
        comparable=main.comparable if main else 0,
        mismatches=main.summary.mismatches if main else 0,
        rate=verdict.candidate_rate,
        bound=verdict.candidate_high,
        floor_rate=verdict.floor_rate,
    )


def machine_facts(run: RunInfo, judgment: Judgment) -> MachineFacts:
    """The machine the run recorded and the report's sentences on foreign load."""
    host = run.provenance.host
    if host is None:
        return MachineFacts(neighbours=list(judgment.neighbours))
    return MachineFacts(host=host.processor or host.machine, cpus=host.cpus, memory_gib=host.memory_gib,
                        gpu=host.gpu, neighbours=list(judgment.neighbours))


def ci_facts(environ: Mapping[str, str]) -> CIFacts:
    """Where a CI job ran the sign-off: GitHub Actions (``GITHUB_ACTIONS``) or GitLab CI
    (``GITLAB_CI``); empty elsewhere."""
    env = {key: value for key, value in environ.items() if value}
    if env.get("GITHUB_ACTIONS") == "true":
        pull = _PULL_REF.match(env.get("GITHUB_REF", ""))
        server, repo, run = (env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
        url = f"{server.rstrip('/')}/{repo}/actions/runs/{run}" if server and repo and run else None
        return CIFacts(provider="github", commit=env.get("GITHUB_SHA"),
                       branch=env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME"),
                       pipeline_url=_no_credentials(url), pull_request=pull.group(1) if pull else None)
    if env.get("GITLAB_CI") == "true":
        return CIFacts(provider="gitlab", commit=env.get("CI_COMMIT_SHA"),
                       branch=env.get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME") or env.get("CI_COMMIT_REF_NAME"),
                       pipeline_url=_no_credentials(env.get("CI_PIPELINE_URL")),
                       pull_request=env.get("CI_MERGE_REQUEST_IID"))
    return CIFacts()


def _no_credentials(url: str | None) -> str | None:
    """``url`` without a ``user:password@`` part, should a CI variable carry one."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")
                                     if parts.hostname else ""))
