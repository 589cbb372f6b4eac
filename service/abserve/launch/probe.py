"""The probe request that makes each arm prove its lookup before any load.

Sixteen distinct small images after a short text: with the CPU default's chunked prefill
the prompt is split across several engine steps, so the worker runs the gather step with
the lookup under test several times. Built once, deterministically, with Pillow.
"""

from __future__ import annotations

import base64
import io
import random
from functools import cache
from typing import Any

from PIL import Image

PROBE_IMAGES = 16


@cache
def _image_urls(count: int, size: int = 28) -> tuple[str, ...]:
    rng = random.Random(0)
    urls = []
    for _ in range(count):
        pixels = bytes(rng.randrange(256) for _ in range(size * size * 3))
        buffer = io.BytesIO()
        Image.frombytes("RGB", (size, size), pixels).save(buffer, format="PNG")
        urls.append("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
    return tuple(urls)


def probe_body(model: str, images: int = PROBE_IMAGES) -> dict[str, Any]:
    """A chat request with ``images`` images; greedy, a few output tokens."""
    content: list[dict[str, Any]] = [{"type": "text", "text": "abserve probe: look at each picture."}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in _image_urls(images)]
    return {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": 4, "temperature": 0.0}
