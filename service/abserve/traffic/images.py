"""Seeded synthetic images, encoded once as PNG or JPEG data URLs.

Each image is a deterministic function of its seed: a random colour field (incompressible, so
byte sizes are honest) with a seeded gradient band, encoded by Pillow with fixed settings, so
the same seed gives the same bytes on every run and every worker.
"""

from __future__ import annotations

import base64
import hashlib
import io
import random
from dataclasses import dataclass

from PIL import Image

from abserve.traffic.profiles import ImageFormat

_MIME = {"png": "image/png", "jpeg": "image/jpeg"}


@dataclass(frozen=True)
class EncodedImage:
    """One image as it goes on the wire."""

    data_url: str
    sha256: str  # of the encoded image bytes
    n_bytes: int  # encoded image bytes (before base64)
    width: int
    height: int
    fmt: ImageFormat


def make_image(seed: int, width: int, height: int, fmt: ImageFormat,
               jpeg_quality: int = 90) -> EncodedImage:
    """Draw and encode one image; the same arguments always give the same bytes."""
    rng = random.Random(seed)
    pixels = bytearray(rng.randbytes(width * height * 3))
    band = rng.randrange(height) if height else 0
    shade = rng.randrange(256)
    for x in range(width):
        i = (band * width + x) * 3
        pixels[i:i + 3] = bytes((shade, (x * 255) // max(width - 1, 1), 255 - shade))
    image = Image.frombytes("RGB", (width, height), bytes(pixels))
    buf = io.BytesIO()
    if fmt == "png":
        image.save(buf, format="PNG", optimize=False, compress_level=6)
    else:
        image.save(buf, format="JPEG", quality=jpeg_quality, optimize=False, progressive=False)
    raw = buf.getvalue()
    url = f"data:{_MIME[fmt]};base64,{base64.b64encode(raw).decode('ascii')}"
    return EncodedImage(url, hashlib.sha256(raw).hexdigest(), len(raw), width, height, fmt)


def data_url_bytes(url: str) -> bytes:
    """The bytes a ``data:`` URL carries: its payload base64-decoded when the URL says
    ``;base64``, else as written; ``ValueError`` (``binascii.Error``) for broken base64."""
    head, _, payload = url.partition(",")
    if head.endswith(";base64"):
        return base64.b64decode(payload, validate=True)
    return payload.encode()


def decode_data_url(url: str) -> bytes:
    """The image bytes inside a ``data:image/...;base64,`` URL (for checks and tests)."""
    head, sep, _ = url.partition(",")
    if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
        raise ValueError("not a base64 image data URL")
    return data_url_bytes(url)
