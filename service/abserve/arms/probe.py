"""The probe request that makes each arm prove its lookup before any load.

Sixteen distinct small images after a short text: with the CPU default's chunked prefill
the prompt is split across several engine steps, so the worker runs the gather step with
the lookup under test several times. Images come from the traffic generator's seeded maker.
"""

from __future__ import annotations

from typing import Any

from abserve.traffic.images import make_image

PROBE_IMAGES = 16


def probe_body(model: str, images: int = PROBE_IMAGES) -> dict[str, Any]:
    """A chat request with ``images`` images; greedy, a few output tokens."""
    content: list[dict[str, Any]] = [{"type": "text", "text": "abserve probe: look at each picture."}]
    content += [
        {"type": "image_url", "image_url": {"url": make_image(seed, 28, 28, "png").data_url}}
        for seed in range(images)
    ]
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 4,
        "temperature": 0.0,
    }
