"""The router's prompt-logprob sample (issue 9, item 2) against real local upstreams.

On a sampled exchange every arm is asked, after the measured exchange, for the prompt
logprobs of the same request (non-streamed, one token); they land in each arm's record and
never in the client's answer. An arm whose prompt logprobs moved is ``drift``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.fake_upstream import Knobs
from tests.support.prompt_logprob_upstream import PROMPT_IDS, PromptLogprobUpstream
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.compare.equality import compare_pair

CHAT = {"model": "fake-model", "max_tokens": 4, "stream": True,
        "messages": [{"role": "user", "content": "describe"}]}


@pytest.fixture
def upstreams() -> Iterator[tuple[PromptLogprobUpstream, PromptLogprobUpstream]]:
    a, b = PromptLogprobUpstream(Knobs(n_tokens=4)), PromptLogprobUpstream(Knobs(n_tokens=4), 5)
    with a, b:
        yield a, b


def _router(ups: tuple[PromptLogprobUpstream, ...], tmp_path: Path, fraction: float,
            sink: ListSink) -> RouterServer:
    urls = {"a": ups[0].url, "b": ups[1].url}
    settings = dev_settings(urls, tmp_path, prompt_logprobs_fraction=fraction, prompt_logprobs_k=2)
    return RouterServer(settings, sink=sink)


def test_streamed_request_is_probed_on_every_arm_and_the_client_never_sees_it(
        upstreams: tuple[PromptLogprobUpstream, PromptLogprobUpstream], tmp_path: Path) -> None:
    sink = ListSink()
    with _router(upstreams, tmp_path, 1.0, sink) as router:
        resp = httpx.post(f"{router.url}/v1/chat/completions", json=CHAT, timeout=10)
        assert resp.status_code == 200
        assert "data: [DONE]" in resp.text
        assert '"prompt_logprobs":[' not in resp.text
        assert '"prompt_token_ids":[' not in resp.text
        (ex,) = sink.wait_for(1)
    for up in upstreams:
        measured, probe = up.observed.bodies
        assert measured["stream"] is True
        assert "prompt_logprobs" not in measured
        assert probe["prompt_logprobs"] == 2
        assert probe["max_tokens"] == 1
        assert "stream" not in probe
        assert probe["messages"] == CHAT["messages"]
    a, b = ex.arms["a"].prompt_logprobs, ex.arms["b"].prompt_logprobs
    assert a is not None
    assert b is not None
    assert len(a) == len(PROMPT_IDS) - 1
    assert [p.token_id for p in a] == PROMPT_IDS[1:]
    assert [len(p.top) for p in a] == [2] * 9
    assert a[0].logprob == pytest.approx(-2.1)
    assert a[0].top[0].token_id == 200
    assert len(ex.arms["a"].token_ids) == 4  # the measured exchange is recorded as usual
    r = compare_pair(ex.request_id, "a", "b", ex.arms["a"], ex.arms["b"])
    assert r.cls == "drift"
    assert r.drift_position is None
    assert r.prompt_drift_position == 4


def test_non_streamed_completions_are_probed_and_the_body_stays_clean(
        upstreams: tuple[PromptLogprobUpstream, PromptLogprobUpstream], tmp_path: Path) -> None:
    sink = ListSink()
    with _router(upstreams, tmp_path, 1.0, sink) as router:
        body = {"model": "fake-model", "prompt": "hello there", "max_tokens": 4}
        resp = httpx.post(f"{router.url}/v1/completions", json=body, timeout=10)
        assert resp.status_code == 200
        assert resp.json()["choices"][0].get("prompt_logprobs") is None
        (ex,) = sink.wait_for(1)
    assert ex.arms["a"].prompt_logprobs is not None
    assert len(ex.arms["a"].prompt_logprobs) == 9
    assert upstreams[0].observed.bodies[1]["prompt"] == "hello there"


def test_unsampled_exchanges_send_nothing_extra(
        upstreams: tuple[PromptLogprobUpstream, PromptLogprobUpstream], tmp_path: Path) -> None:
    sink = ListSink()
    with _router(upstreams, tmp_path, 0.0, sink) as router:
        assert httpx.post(f"{router.url}/v1/chat/completions", json=CHAT, timeout=10).is_success
        (ex,) = sink.wait_for(1)
    assert [up.observed.requests for up in upstreams] == [1, 1]
    assert ex.arms["a"].prompt_logprobs is None
    assert ex.arms["b"].prompt_logprobs is None


def test_a_failed_probe_leaves_that_arm_unsampled_and_the_exchange_recorded(
        upstreams: tuple[PromptLogprobUpstream, PromptLogprobUpstream], tmp_path: Path) -> None:
    upstreams[1].probe_status = 500
    sink = ListSink()
    with _router(upstreams, tmp_path, 1.0, sink) as router:
        assert httpx.post(f"{router.url}/v1/chat/completions", json=CHAT, timeout=10).is_success
        (ex,) = sink.wait_for(1)
    assert ex.arms["a"].prompt_logprobs is not None
    assert ex.arms["b"].prompt_logprobs is None
    assert ex.arms["b"].ok
    assert compare_pair("r", "a", "b", ex.arms["a"], ex.arms["b"]).cls == "identical"
