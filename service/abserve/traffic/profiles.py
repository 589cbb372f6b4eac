"""Traffic profiles: what requests the load generator makes, as validated pydantic models.

A profile lives in ``configs/traffic/<name>.yaml`` (packaged: ``abserve.base.packaged``) and says how
many images a request carries, their sizes and formats, how much text surrounds them and in what
layout, the sampling knobs (``max_tokens``, temperature, seed) and, for ``chunk-boundary``, where
image spans must sit relative to multiples of the server's ``max_num_batched_tokens``. A
``session`` section makes every request a turn of a conversation (``SessionSpec``). Every knob
can be overridden from the command line with dotted ``key=value`` pairs (``images.count=[4,8]``),
so one file per intent is enough. Loading is pure apart from reading the YAML file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from abserve.base.packaged import packaged_root

PROFILE_DIR = packaged_root() / "traffic"

ImageFormat = Literal["png", "jpeg"]
Layout = Literal["images_first", "text_first", "interleaved"]
Placement = Literal["start", "end", "straddle"]


class ProfileError(ValueError):
    """A profile could not be found, parsed or validated."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageSpec(_Strict):
    """Images per request and how each one looks on the wire."""

    count: tuple[int, int] = Field((1, 1), description="min, max images per request (inclusive)")
    sizes: list[tuple[int, int]] = Field([(28, 28)], min_length=1,
                                         description="(width, height) choices in pixels")
    formats: list[ImageFormat] = Field(["png"], min_length=1)
    jpeg_quality: int = Field(90, ge=1, le=100)
    pool_size: int | None = Field(None, ge=1, description="draw from a fixed pool (cache reuse)")
    pool_order: Literal["fixed", "random"] = Field(
        "random", description="fixed: every request uses pool[0:n] in order (prefix-cache hits)")

    @model_validator(mode="after")
    def _check(self) -> ImageSpec:
        lo, hi = self.count
        if lo < 0 or hi < lo:
            raise ValueError(f"images.count must be 0 <= min <= max, got {self.count}")
        if any(w < 1 or h < 1 or w > 4096 or h > 4096 for w, h in self.sizes):
            raise ValueError("images.sizes must be between 1 and 4096 pixels per side")
        if self.pool_order == "fixed" and self.pool_size is not None and self.pool_size < hi:
            raise ValueError("images.pool_size must be >= images.count max for pool_order fixed")
        return self


class TextSpec(_Strict):
    """Words of text per request (one word is about one token for the tiny model)."""

    words: tuple[int, int] = Field((16, 16), description="min, max words per request")
    shared_prefix_words: int = Field(0, ge=0, description="same leading words in every request")

    @model_validator(mode="after")
    def _check(self) -> TextSpec:
        if self.words[0] < 0 or self.words[1] < self.words[0]:
            raise ValueError(f"text.words must be 0 <= min <= max, got {self.words}")
        return self


class ChunkBoundarySpec(_Strict):
    """Put image spans at, before and across multiples of the server's token budget per step."""

    max_num_batched_tokens: int = Field(..., ge=2, description="the servers' chunk size")
    placements: list[Placement] = Field(["start", "end", "straddle"], min_length=1)
    first_multiple: int = Field(1, ge=1, description="image i targets multiple first_multiple+i")
    tail_words: int = Field(8, ge=0, description="text after the last image")
    tokenize_url: str | None = Field(None, description="server for /tokenize; default the host")
    max_iterations: int = Field(8, ge=1, le=50)


class SessionSpec(_Strict):
    """Conversations: request ``i`` is turn ``i % turns + 1`` of session ``i // turns``; turn
    ``k`` carries the system prompt, every earlier turn and its reply (generated, the same on
    every run), then its own text (``text.words``) and images. ``images.*`` then describe a
    session's images, not a request's: ``images.count`` of them (drawn once per session)
    spread evenly over its turns, turn ``k`` resending those of the turns before."""

    turns: int = Field(4, ge=1, le=64, description="turns per session")
    system_words: int = Field(0, ge=0, description="a system prompt every session shares")
    reply_words: int = Field(16, ge=0, description="words of each recorded assistant reply")
    think_s: float = Field(0.0, ge=0, le=3600, description="pause before each later turn")


class TrafficProfile(_Strict):
    """One kind of traffic; see ``configs/traffic/*.yaml`` for the documented instances."""

    name: str = Field(..., pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    model: str | None = Field(None, description="model name; None asks the server /v1/models")
    layout: Layout = "images_first"
    images: ImageSpec = ImageSpec.model_validate({})
    text: TextSpec = TextSpec.model_validate({})
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    ignore_eos: bool = Field(True, description="vLLM extension: always produce max_tokens")
    stream: bool = True
    seed: int = Field(0, description="default corpus seed when the run gives none")
    tokens_per_image_estimate: int = Field(4, ge=1, description="for the token-estimate tag")
    chunk_boundary: ChunkBoundarySpec | None = None
    session: SessionSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> TrafficProfile:
        if self.session is not None and self.chunk_boundary is not None:
            raise ValueError("session and chunk_boundary do not go together")
        if self.session is not None and self.text.words[0] < 1:
            raise ValueError("a session's turns need text: text.words min >= 1")
        if self.chunk_boundary is not None:
            if self.layout != "interleaved":
                raise ValueError("chunk_boundary needs layout: interleaved")
            if self.images.count[0] < 1:
                raise ValueError("chunk_boundary needs at least one image per request")
        return self


def resolve_profile_path(profile: str | Path) -> Path:
    """A profile name (``many-items``) or a path to a YAML file, as an existing path."""
    path = Path(profile)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ProfileError(f"profile file not found: {path}")
        return path
    candidate = PROFILE_DIR / f"{profile}.yaml"
    if not candidate.is_file():
        known = ", ".join(available_profiles()) or "none"
        raise ProfileError(f"unknown traffic profile {profile!r} (known: {known})")
    return candidate


def available_profiles() -> list[str]:
    """Names of the profiles shipped in ``configs/traffic``."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(profile: str | Path, overrides: dict[str, Any] | None = None) -> TrafficProfile:
    """Read and validate a profile, applying dotted-key ``overrides`` first."""
    path = resolve_profile_path(profile)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping at the top level")
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value)
    try:
        return TrafficProfile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{path}: {exc}") from exc


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["images.count=[4,8]", "max_tokens=32"]`` -> dotted keys with YAML-parsed values."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ProfileError(f"override {pair!r} is not key=value")
        out[key.strip()] = yaml.safe_load(raw)
    return out


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ProfileError(f"override {key!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value
