"""One entry of the release ledger: what a sign-off was, in the few numbers a release stream reads.

Every report ``abserve run`` or ``abserve report`` writes adds (or replaces) the entry of its
run in the store's ``abserve_ledger`` table; ``abserve ledger`` renders the entries as a static
site and ``abserve accept`` marks an entry's candidate build as a config's accepted baseline
(``abserve_accepted``). An entry is a summary of the run's ``Judgment`` and provenance, made
once, so the ledger never re-judges a run and a store of 1,000 sign-offs renders in seconds.
Versioned by ``schema_version``: a reader shows an entry of a newer version as such.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

LEDGER_SCHEMA_VERSION = 1


class ArmBuild(BaseModel):
    """What one arm ran: enough to say which build it was and how it differed from the others."""

    name: str
    role: str | None = None  # baseline / candidate / floor / other
    kind: str = "managed"  # managed | external | image
    vllm_version: str | None = None
    image: str | None = None  # reference as configured
    image_digest: str | None = None  # the image id / digest the arm ran
    install: list[str] = Field(default_factory=list)  # pip requirements abserve installed
    python: str | None = None  # the interpreter of a managed arm
    git_sha: str | None = None  # where the arm knows it (an image label, a source checkout)
    lookup: str | None = None  # the lookup mode the arm proved (None: untouched or unproven)
    proof: str = ""  # "proven bisect", "identified", "unproven", ...
    server_args: list[str] = Field(default_factory=list)
    flags_differ: list[str] = Field(default_factory=list)  # args/env this arm has that the baseline lacks


class GateEffect(BaseModel):
    """One gate's measured effect (candidate - baseline, seconds) and its interval."""

    name: str  # "tpot.hl"
    metric: str
    critical: bool
    outcome: str
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    relative: float | None = None
    threshold: float | None = None  # the allowance in the bad direction (seconds)
    baseline_value: float | None = None


class EqualityFacts(BaseModel):
    """The equality gate in numbers: mismatches and the bound on the candidate's rate."""

    outcome: str | None = None  # None: equality was not judged
    comparable: int = 0
    mismatches: int = 0
    rate: float | None = None
    bound: float | None = None  # upper end of the candidate's mismatch-rate interval
    floor_rate: float | None = None


class CIFacts(BaseModel):
    """Where a CI job ran the sign-off (GitHub Actions or GitLab CI variables), when it did."""

    provider: str | None = None  # "github" | "gitlab"
    commit: str | None = None
    branch: str | None = None
    pipeline_url: str | None = None
    pull_request: str | None = None


class MachineFacts(BaseModel):
    """The machine and what else ran on it."""

    host: str | None = None
    cpus: int | None = None
    memory_gib: float | None = None
    gpu: str | None = None
    neighbours: list[str] = Field(default_factory=list)  # the report's foreign-load sentences


class LedgerEntry(BaseModel):
    """One sign-off: a row of the ledger's index and a point of each config's trend."""

    schema_version: int = LEDGER_SCHEMA_VERSION
    run_id: str
    recorded_at: float  # when the report was written (Unix time)
    started_at: float | None = None
    duration_s: float | None = None
    config_name: str | None = None
    config_sha256: str | None = None
    verdict: str
    exit_code: int
    reasons: list[str] = Field(default_factory=list)
    requests: int = 0  # exchanges judged (after warm-up)
    exchanges_total: int = 0
    arms: list[ArmBuild] = Field(default_factory=list)
    gates: list[GateEffect] = Field(default_factory=list)  # critical gates first
    equality: EqualityFacts = Field(default_factory=EqualityFacts)
    machine: MachineFacts = Field(default_factory=MachineFacts)
    ci: CIFacts = Field(default_factory=CIFacts)
    report_dir: str | None = None  # absolute path of the report files when written
    accepted_from: str | None = None  # the accepted run whose build was this run's baseline
    accepted_name: str | None = None  # that release's name (``abserve accept --as NAME``)

    def arm(self, role: str) -> ArmBuild | None:
        """The first arm with ``role`` (``baseline`` / ``candidate``)."""
        return next((a for a in self.arms if a.role == role), None)


class AcceptedBuild(BaseModel):
    """A release accepted as its config's baseline: ``abserve accept RUN_ID --as NAME``."""

    name: str  # the release name given with --as
    config_name: str
    run_id: str
    arm: str  # the accepted (candidate) arm of that run
    accepted_at: float
    build: ArmBuild
    arm_config: dict[str, object] = Field(default_factory=dict)  # the arm as configured, to start it again
