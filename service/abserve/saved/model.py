"""The one shape every reader of a saved run yields: a run's header, then its requests, streamed.

Readers (``vllm bench serve`` JSON, AIPerf ``profile_export.jsonl``, GuideLLM reports, an arm
of a stored abserve run) turn their tool's records into ``SavedRequest`` one at a time, so a
file of 100,000 requests is never held whole. Times are seconds. ``prompt_key`` matches a
request across sides by what was asked (prompt text and image hashes), never by position;
``None`` when the tool did not save the prompt (``vllm bench serve`` never does; AIPerf,
GuideLLM and abserve arms do: ``abserve.saved.sources``). ``open_saved`` there picks the reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Tool = Literal["vllm-bench", "aiperf", "guidellm", "abserve"]


class SavedRunError(ValueError):
    """A saved run cannot be read: the message names the file and why (exit 4)."""


@dataclass(frozen=True, slots=True)
class SavedRequest:
    """One request as a tool recorded it."""

    ok: bool  # False: the tool recorded an error for it
    ttft: float | None = None
    tpot: float | None = None  # mean inter-token latency after the first token
    e2e: float | None = None
    itl: tuple[float, ...] | None = None  # every inter-token gap, where saved
    input_tokens: int | None = None
    output_tokens: int | None = None
    prompt_key: str | None = None  # sha256 of the prompt text and image hashes
    output_text: str | None = None
    output_token_ids: tuple[int, ...] | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SavedRunHeader:
    """What a run was: the tool, the file, the model served, when, and the tool's own summary."""

    tool: Tool
    source: str  # the file (or RUN_ID:ARM) as the user named it
    model: str | None = None
    started_at: float | None = None
    duration_s: float | None = None
    summary: dict[str, float] = field(default_factory=dict)  # the tool's own aggregates, for display


@dataclass(slots=True)
class SavedRun:
    """A header and a one-pass iterator of its requests (re-open the source to read again)."""

    header: SavedRunHeader
    requests: Iterator[SavedRequest]
