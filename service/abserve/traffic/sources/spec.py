"""What a traffic file is and how it is replayed: the options of a ``file`` source.

``FileOptions`` is what a user writes (config ``load.profiles[].file``, ``abserve load
--requests-file``); ``FileSource`` adds what the run knows about its router (body and image
limits, the media hosts that router and arms allow, whether seeded sampling is allowed, the
served model) and the window of accepted requests one load process sends. ``FileSource`` is
handed to the Locust process as JSON (``--abserve-source``), so every process reads the same
file the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_serializer

from abserve.traffic.sources import formats
from abserve.traffic.sources.mooncake import TraceOptions

# ``auto`` or a name in ``formats.FORMATS`` (checked against the table when validated)
FileFormat = Annotated[str, BeforeValidator(formats.check_name)]
Replay = Literal["recorded", "closed"]
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024  # abserve.router.settings.RouterSettings defaults
DEFAULT_MAX_IMAGES = 64


class RequestsFileError(ValueError):
    """A traffic file that cannot be sent as it is; the message names the file and line."""


class FileOptions(BaseModel):
    """A traffic file and how to replay it (the user's side)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: Path
    format: FileFormat = "auto"
    # recorded: open loop at the recorded arrival times (the load's users cap requests in
    # flight); closed: the load's users each send the next line when their last one ended
    replay: Replay = "recorded"
    time_scale: float = Field(1.0, gt=0, description="0.5 replays twice as fast")
    sample: float = Field(1.0, gt=0, le=1, description="keep this fraction of the lines")
    seed: int = Field(0, description="which lines the sample keeps")
    greedy: bool = Field(False, description="send sampling requests with temperature 0")
    skip_invalid: bool = Field(False, description="count and list bad lines instead of failing")
    max_tokens: int = Field(16, ge=1, description="bench formats: lines without output_tokens")
    # replay conversations as sessions (``abserve.traffic.turns``): ShareGPT conversations of
    # several turns, lines with a session_id; false: each line one request (ShareGPT: its
    # first turn only, as before)
    sessions: bool = True
    trace: TraceOptions = Field(default_factory=TraceOptions, description="mooncake traces")

    @field_serializer("path")
    def _path_text(self, path: Path) -> str:  # model_dump() is JSON-ready (provenance)
        return str(path)


class FileSource(FileOptions):
    """A traffic file as one run sends it: the user's options and the router's rules."""

    model: str | None = Field(None, description="the served model written into every body")
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1)
    max_images: int = Field(DEFAULT_MAX_IMAGES, ge=0)
    allowed_media_hosts: tuple[str, ...] = ()
    max_context: int | None = Field(None, ge=1, description="the model's context (tokens), if known")
    seeded_sampling: Literal["allow", "refuse"] = "refuse"
    label: str = Field("file", pattern=r"^[a-z0-9][a-z0-9-]*$", description="the profile tag")
    skip: int = Field(0, ge=0, description="accepted requests passed over first")
    limit: int | None = Field(None, ge=1, description="send this many (wrapping around)")
    # the accepted requests found when the run checked the file: a load process given it does
    # not walk the whole file again first (a change since is still caught, at its line)
    checked: int | None = Field(None, ge=1)
    checked_sessions: int = Field(0, ge=0, description="sessions found when checked")


def label_for(path: Path) -> str:
    """The profile tag of a file's requests: ``file-`` and its name's stem, tag-safe."""
    stem = "".join(ch if ch.isalnum() else "-" for ch in path.stem.lower()).strip("-")
    return f"file-{stem[:40] or 'requests'}"
