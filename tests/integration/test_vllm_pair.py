"""Proof on real servers: a linear and a bisect vLLM server give the same tokens for 1, 8
and 64+ image requests with long text, and each proves its own lookup from the gather
step of its worker; a server started without the mode variable shows as unproven."""

from __future__ import annotations

import time

import httpx
import pytest
from tests.integration.conftest import VllmPair
from tests.support.mm_requests import chat_request

from abserve.model.telemetry import FLUSH_INTERVAL_S, prove_lookup, read_telemetry

pytestmark = pytest.mark.vllm


def ask(url: str, body: dict[str, object]) -> dict[str, object]:
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text[:500]
    return response.json()


def token_ids(reply: dict[str, object]) -> list[int]:
    choices = reply["choices"]
    assert isinstance(choices, list)
    (choice,) = choices
    return list(choice["token_ids"])


@pytest.mark.parametrize(("images", "words"), [(1, 1500), (8, 1200), (72, 600), (300, 200)])
def test_linear_and_bisect_servers_give_identical_tokens(
    vllm_pair: VllmPair, images: int, words: int
) -> None:
    body = chat_request(vllm_pair.model, images=images, words=words, seed=images)
    replies = {arm: ask(url, body) for arm, url in vllm_pair.urls.items()}
    ids = {arm: token_ids(reply) for arm, reply in replies.items()}
    assert ids["a"] == ids["b"]
    assert len(ids["a"]) > 0
    assert len(set(ids["a"])) > 1, "degenerate output: one token repeated"
    usage = replies["a"]["usage"]
    assert usage["prompt_tokens"] > vllm_pair.max_num_batched_tokens  # type: ignore[index]


def test_each_server_proves_its_own_lookup_in_the_gather_step(vllm_pair: VllmPair) -> None:
    ask(vllm_pair.urls["a"], chat_request(vllm_pair.model, images=16, words=100))
    ask(vllm_pair.urls["b"], chat_request(vllm_pair.model, images=16, words=100))
    for arm, expected in (("a", "linear"), ("b", "bisect")):
        records = read_telemetry(vllm_pair.telemetry_dirs[arm])
        proof = prove_lookup(records, expected)
        assert proof.ok, proof.detail
        assert proof.totals.gather_calls > 0
        assert proof.totals.lookup_calls > 0
        runner = [r for r in records if r.counters.gather_calls > 0]
        assert runner
        assert all(r.role != "api_server" for r in runner)
        assert "vllm.v1.worker.gpu_model_runner" in proof.patched


def test_linear_examines_more_items_than_bisect_on_many_images(vllm_pair: VllmPair) -> None:
    before = {a: prove_lookup(read_telemetry(d), None).totals for a, d in vllm_pair.telemetry_dirs.items()}
    body = chat_request(vllm_pair.model, images=400, words=50, max_tokens=8)
    for url in vllm_pair.urls.values():
        ask(url, body)
    time.sleep(2 * FLUSH_INTERVAL_S + 0.2)  # the plugin's telemetry has flushed
    after = {a: prove_lookup(read_telemetry(d), None).totals for a, d in vllm_pair.telemetry_dirs.items()}
    examined = {a: after[a].items_examined - before[a].items_examined for a in after}
    assert examined["a"] > 5 * examined["b"] > 0


def test_server_without_mode_is_unproven_but_identified(vllm_pair: VllmPair) -> None:
    server = vllm_pair.plain
    assert server.telemetry_dir is not None
    ask(server.url, chat_request(vllm_pair.model, images=4, words=50))
    time.sleep(2 * FLUSH_INTERVAL_S + 0.2)  # a telemetry flush would have happened
    records = read_telemetry(server.telemetry_dir)
    proof = prove_lookup(records, "linear")
    assert not proof.ok
    assert proof.proven is None
    assert "ABSERVE_MM_LOOKUP unset" in proof.detail
    # vLLM untouched, but every process said what it ran: the proof of a change that is not the lookup
    assert {r.mode for r in records} == {None}
    assert all(r.patched == [] and r.counters.lookup_calls == 0 for r in records)
    api = [r for r in records if r.role == "api_server"]
    assert api, [r.role for r in records]
    assert api[0].vllm_version
    assert "--served-model-name" in api[0].argv
