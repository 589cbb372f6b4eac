"""The exchange record: what the router saw when one request went to every arm.

This module is the contract between the router (which writes records), the store
(which persists them) and the judgment (which reads them). It is pure data: no I/O.

Times are seconds on the router's monotonic clock, relative to ``Exchange.t0``, the
instant the request was fanned out; every arm is timestamped by the same code at the
same point in its stream, so the arms are measured the same way. ``started_at`` is
wall-clock (Unix seconds) for humans and for ordering runs.

Bump ``SCHEMA_VERSION`` on any incompatible change; readers refuse newer versions. Version 2
is the columnar stored form of the token-level data (``abserve.model.token_columns``); the models
here did not change, and the store still reads the records of version 1.

In JSON a logprob of ``-inf`` (vLLM's for a token of probability 0) is written as the
constant ``-Infinity`` (``RECORD_CONFIG``), never as ``null``: a record read back is the
record written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from abserve.model.provenance import RunProvenance

SCHEMA_VERSION = 2
RECORD_CONFIG = ConfigDict(ser_json_inf_nan="constants")

ErrorClass = Literal[
    "connect",  # could not connect / connection refused
    "timeout_first_token",  # no first token within the first-token deadline
    "timeout_idle",  # stream stalled longer than the idle deadline
    "timeout_total",  # whole exchange exceeded its deadline
    "http_status",  # upstream answered with a non-2xx status
    "truncated",  # stream ended without its terminator (no [DONE] / incomplete body)
    "bad_response",  # upstream answered with something that is not valid OpenAI JSON/SSE
    "cancelled",  # client disconnected; upstream request cancelled
]


class TopLogprob(BaseModel):
    """One candidate of the top-k at a position."""

    model_config = RECORD_CONFIG

    token: str
    logprob: float
    token_id: int | None = None


class PositionLogprobs(BaseModel):
    """The chosen token at one output position and the top-k candidates there."""

    model_config = RECORD_CONFIG

    token: str
    logprob: float
    token_id: int | None = None
    top: list[TopLogprob] = Field(default_factory=list)


class ArmOutcome(BaseModel):
    """What one arm returned for one exchange."""

    model_config = RECORD_CONFIG

    arm: str
    status: int | None = None  # HTTP status; None when no response arrived
    error_class: ErrorClass | None = None
    error_detail: str | None = None  # short, never contains prompt text, keys or images
    vllm_request_id: str | None = None
    t_send: float = 0.0
    t_first_byte: float | None = None
    t_first_token: float | None = None
    token_times: list[float] = Field(default_factory=list)  # arrival of each output token
    t_end: float | None = None
    text: str = ""
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[PositionLogprobs] = Field(default_factory=list)
    prompt_logprobs: list[PositionLogprobs] | None = None  # only on sampled requests
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error_class is None and self.status is not None and 200 <= self.status < 300


@dataclass(slots=True)
class SlimOutcome:
    """The scalar part of an ``ArmOutcome`` the judgment keeps once its token-level data is
    digested (``abserve.compare.digest``): a few hundred bytes instead of one object per
    token position. It answers the attributes the judgment reads of an outcome (``ok``,
    times, status, usage, finish reason, truncation); ``tokens`` is how many output tokens
    the router saw (``max(len(token_ids), len(token_times))``) and ``has_tokens`` whether
    the outcome carried any token sequence (ids or chosen tokens)."""

    arm: str
    status: int | None
    error_class: ErrorClass | None
    t_send: float
    t_first_token: float | None
    t_end: float | None
    finish_reason: str | None
    usage: dict[str, int] | None
    truncated: bool
    tokens: int
    has_tokens: bool

    @classmethod
    def of(cls, outcome: ArmOutcome) -> SlimOutcome:
        return cls(arm=outcome.arm, status=outcome.status, error_class=outcome.error_class,
                   t_send=outcome.t_send, t_first_token=outcome.t_first_token, t_end=outcome.t_end,
                   finish_reason=outcome.finish_reason, usage=outcome.usage,
                   truncated=outcome.truncated,
                   tokens=max(len(outcome.token_ids), len(outcome.token_times)),
                   has_tokens=bool(outcome.token_ids) or bool(outcome.logprobs))

    @property
    def ok(self) -> bool:
        return self.error_class is None and self.status is not None and 200 <= self.status < 300


class Exchange(BaseModel):
    """One client request fanned out to every arm, and what each arm answered."""

    model_config = RECORD_CONFIG

    schema_version: int = SCHEMA_VERSION
    run_id: str
    request_id: str  # returned to the client in the ``x-abserve-request-id`` header
    endpoint: Literal["chat/completions", "completions"]
    stream: bool
    fingerprint: str  # BLAKE3 of the canonical request; image bytes hashed, never stored
    prompt_text: str | None = None  # stored only when the router is configured to
    image_hashes: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)  # from x-abserve-* request headers
    started_at: float  # Unix seconds at fan-out
    arms: dict[str, ArmOutcome]


class LookupTelemetry(BaseModel):
    """Counters the vLLM plugin kept in one arm's server (summed over its processes)."""

    lookup_calls: int = 0  # calls of the window lookup under test
    items_examined: int = 0  # multimodal items the lookup looked at (linear: visited; bisect: probes)
    lookup_seconds: float = 0.0  # time spent inside the lookup
    gather_calls: int = 0  # calls of the runner's gather step (one per engine step with mm work)
    gather_seconds: float = 0.0  # time spent in the gather step
    items_per_request: dict[str, int] = Field(default_factory=dict)  # histogram: "k" -> lookups
    # items examined by the lookups of requests in bucket "k" (power of two; empty: not recorded)
    examined_per_request: dict[str, int] = Field(default_factory=dict)


class ArmProvenance(BaseModel):
    """What one arm's server was and what it proved it ran (filled by the orchestrator)."""

    expected_lookup: str | None = None  # "linear" | "bisect" | None (vLLM untouched)
    proven_lookup: str | None = None  # the mode the worker process proved; None = unproven
    proof_detail: str = ""  # why proven / unproven, human readable
    patched_modules: list[str] = Field(default_factory=list)
    vllm_version: str | None = None
    server_args: list[str] = Field(default_factory=list)
    url: str | None = None
    placement: dict[str, object] = Field(default_factory=dict)  # cpus / gpu assigned
    telemetry: LookupTelemetry = Field(default_factory=LookupTelemetry)
    # The general arm (abserve.model.arms): how it ran, its env (secrets masked: references as
    # written), its interpreter and the model it served (id, revision or root).
    kind: str = "managed"  # managed | external | image
    role: str | None = None
    python: str | None = None
    server_env: dict[str, str] = Field(default_factory=dict)
    model: dict[str, object] = Field(default_factory=dict)
    image: str | None = None  # compose: the image the arm ran (reference and id)

    @property
    def identified(self) -> bool:
        """Whether the arm's server said what it ran (vLLM version and its own command line, or
        the image): the proof of an arm whose change is not the lookup."""
        return bool(self.vllm_version and (self.server_args or self.image))

    @property
    def proof_state(self) -> str:
        """``proven <mode>``, ``identified`` or ``unproven`` (nothing to prove), or ``NOT proven <mode>``."""
        if self.expected_lookup is None:
            if self.proven_lookup:
                return f"proven {self.proven_lookup}"
            return "identified" if self.identified else "unproven"
        if self.proven_lookup == self.expected_lookup:
            return f"proven {self.proven_lookup}"
        return f"NOT proven {self.expected_lookup}"


class RunInfo(BaseModel):
    """A run: a sequence of exchanges judged together."""

    run_id: str
    status: Literal["running", "completed", "interrupted"] = "running"
    started_at: float
    ended_at: float | None = None
    config: dict[str, object] = Field(default_factory=dict)  # router/experiment config, no secrets
    # What produced the run (versions, hashes, seeds, host, blocks; abserve.model.provenance);
    # the arms' own provenance is under ``arms``.
    provenance: RunProvenance = Field(default_factory=RunProvenance)
    arms: dict[str, ArmProvenance] = Field(default_factory=dict)


# ``RunInfo.provenance`` key of the router's restarts within one run (``Store.resume_run``):
# a list of ``{"at": unix time, "previous_status": ..., "exchanges_before": n}``
# (``RunProvenance.router_restarts``; the key as the stored JSON spells it).
ROUTER_RESTARTS_KEY = "router_restarts"


# Request headers the load generator sets and the router records as ``Exchange.tags``.
TAG_HEADER_PREFIX = "x-abserve-"
RUN_ID_HEADER = "x-abserve-run-id"
REQUEST_ID_HEADER = "x-abserve-request-id"
# The session-affinity header the load sends with every turn of a session (its session id);
# the router forwards it (and its ``session_headers``) unchanged to every arm.
SESSION_ID_HEADER = "x-session-id"
