"""Router pieces without a network: settings, auth, media-URL policy, augment/strip, SSE."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from abserve.base.event_stream import SSEParser
from abserve.model.records import ArmOutcome
from abserve.openai_request.errors import RouterError
from abserve.openai_request.media_urls import check_media_url, media_host
from abserve.router.augment import Additions, augment, strip
from abserve.router.security import check_bearer
from abserve.router.settings import RouterSettings
from abserve.router.sse import Transcript

KEY = "k" * 24
ARMS = {"a": {"url": "http://127.0.0.1:1"}, "b": {"url": "http://127.0.0.1:2"}}


def test_settings_refuse_to_exist_without_api_key_unless_dev_mode() -> None:
    with pytest.raises(ValidationError, match="api_key is required"):
        RouterSettings(arms=ARMS)
    assert RouterSettings(arms=ARMS, dev_mode=True).api_key is None
    with pytest.raises(ValidationError, match="at least 16"):
        RouterSettings(arms=ARMS, api_key="short")


def test_settings_reject_unknown_primary_and_fields() -> None:
    with pytest.raises(ValidationError, match="primary arm"):
        RouterSettings(arms=ARMS, primary="z", dev_mode=True)
    with pytest.raises(ValidationError):
        RouterSettings(arms=ARMS, dev_mode=True, max_bodybytes=3)


def test_public_config_and_repr_hold_no_secret() -> None:
    s = RouterSettings(arms={"a": {"url": "http://h:1", "api_key": "arm-secret-123"}},
                       api_key=KEY, database_url="postgresql://u:pw@h/db")
    text = repr(s) + str(s.public_config())
    assert KEY not in text
    assert "arm-secret-123" not in text
    assert ("pw@" not in str(
        s.public_config()))


def test_bearer_key_checked() -> None:
    check_bearer(f"Bearer {KEY}", SecretStr(KEY))
    check_bearer(None, None)  # dev mode
    for bad in (None, "", KEY, f"Basic {KEY}", f"Bearer {KEY}x", "Bearer "):
        with pytest.raises(RouterError) as err:
            check_bearer(bad, SecretStr(KEY))
        assert err.value.status == 401


REFUSED = [
    "file:///etc/passwd",
    "FILE:///etc/passwd",
    "ftp://example.com/x.png",
    "gopher://example.com/",
    "//example.com/x.png",
    "http://evil.com/x.png",  # not allowlisted
    "http://127.0.0.1/x.png",
    "http://localhost/x.png",
    "http://2130706433/x.png",  # decimal 127.0.0.1
    "http://0x7f000001/x.png",
    "http://0177.0.0.1/x.png",
    "http://127.1/x.png",
    "http://169.254.169.254/latest/meta-data",  # link-local metadata
    "http://[::1]/x.png",
    "http://[::ffff:127.0.0.1]/x.png",
    "http://[::ffff:7f00:1]/x.png",
    "http://[fe80::1%25eth0]/x.png",
    "http://[2002:7f00:1::]/x.png",  # 6to4 of 127.0.0.1
    "http://10.0.0.1/x.png",
    "http://0.0.0.0/x.png",
    "http://example.com@127.0.0.1/x.png",
    "http://%31%32%37.0.0.1/x.png",
]
ALLOW = ["example.com", "localhost", "127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1",
         "127.1", "169.254.169.254", "::1", "::ffff:127.0.0.1", "::ffff:7f00:1", "fe80::1",
         "2002:7f00:1::", "10.0.0.1", "0.0.0.0", "8.8.8.8"]


@pytest.mark.parametrize("url", REFUSED)
async def test_media_url_tricks_are_refused(url: str) -> None:
    with pytest.raises(RouterError) as err:
        await check_media_url(url, ALLOW)
    assert err.value.status == 400
    assert "refused" in err.value.message


async def test_media_url_allowed_forms() -> None:
    await check_media_url("data:image/png;base64,AAAA", [])
    await check_media_url("http://8.8.8.8/cat.png", ALLOW)  # public literal, allowlisted
    assert media_host("https://Example.COM./x.png", ALLOW) == "example.com"


def test_augment_adds_only_what_the_client_did_not_ask() -> None:
    s = RouterSettings(arms=ARMS, dev_mode=True, top_logprobs=3, default_seed=7)
    body = {"stream": True, "messages": []}
    added = augment(body, "chat/completions", s)
    assert added == Additions(logprobs=True, token_ids=True, usage=True)
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 3
    assert body["seed"] == 7
    full = {"stream": True, "logprobs": True, "top_logprobs": 1, "return_token_ids": True,
            "seed": 1, "stream_options": {"include_usage": True}}
    assert not augment(dict(full), "chat/completions", s).any
    comp = {"prompt": "x"}
    assert augment(comp, "completions", s).logprobs
    assert comp["logprobs"] == 3


def test_strip_restores_nulls_and_drops_the_added_usage_chunk() -> None:
    added = Additions(logprobs=True, token_ids=True, usage=True)
    chunk = {"id": "x", "prompt_token_ids": [1], "choices": [
        {"index": 0, "delta": {"content": "a"}, "logprobs": {"content": []}, "token_ids": [5]}]}
    assert strip(chunk, added) == {"id": "x", "prompt_token_ids": None, "choices": [
        {"index": 0, "delta": {"content": "a"}, "logprobs": None, "token_ids": None}]}
    assert strip({"choices": [], "usage": {"prompt_tokens": 1}}, added) is None
    assert strip({"choices": [{"index": 0}]}, added) == {"choices": [{"index": 0}]}


def test_sse_parser_handles_split_events_and_crlf() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"a"') == []
    assert p.feed(b': 1}\r\n\r\ndata: [DONE]\n\n') == [b'{"a": 1}', b"[DONE]"]
    assert not p.pending


def test_transcript_reads_chat_and_completion_layouts() -> None:
    t = Transcript()
    t.add({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "hi"},
           "token_ids": [4, 5], "logprobs": {"content": [
               {"token": "h", "logprob": -0.5, "top_logprobs": [{"token": "h", "logprob": -0.5}]},
               {"token": "i", "logprob": None, "top_logprobs": []}]}}]}, 0.25)
    t.add({"choices": [{"index": 0, "text": "!", "token_ids": [6], "finish_reason": "stop",
           "logprobs": {"tokens": ["!"], "token_logprobs": [-1.0],
                        "top_logprobs": [{"!": -1.0, "?": -2.0}]}}]}, 0.5)
    out = ArmOutcome(arm="a")
    t.fill(out)
    assert out.text == "hi!"
    assert out.token_ids == [4, 5, 6]
    assert out.token_times == [0.25, 0.25, 0.5]
    assert out.t_first_token == 0.25
    assert out.logprobs[1].logprob == float("-inf")
    assert out.logprobs[2].top[1].token == "?"
    assert out.logprobs[2].token_id == 6
    assert out.finish_reason == "stop"
    assert out.vllm_request_id == "chatcmpl-1"
