"""``arm_payload``: the bytes every arm receives are exactly the augmented request.

The router appends its top-level additions to the client's own bytes (sent in pieces: no
copy) instead of re-encoding a ~1 MB body; whatever path it takes, the arms must parse the
same object as
``sent``, and the client's bytes must be reused only when nothing the client sent changed.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from abserve.router.app import arm_payload
from abserve.router.augment import augment
from abserve.router.settings import ArmSettings, RouterSettings

SETTINGS = RouterSettings(arms={"a": ArmSettings(url="http://127.0.0.1:1")}, dev_mode=True)
CHAT: dict[str, Any] = {"model": "m", "stream": True,
                        "messages": [{"role": "user", "content": "hi \u00e9 \\ \""}]}


def _sent(client: dict[str, Any]) -> dict[str, Any]:
    sent = dict(client)
    augment(sent, "chat/completions", SETTINGS)
    return sent


@pytest.mark.parametrize("tail", [b"", b"\n", b" \r\n\t "])
def test_new_keys_are_appended_to_the_clients_bytes(tail: bytes) -> None:
    raw = b'{"model":"m", "stream":true,"messages":[{"role":"user","content":"hi"}]}' + tail
    client = orjson.loads(raw)
    sent = _sent(client)
    pieces = arm_payload(raw, client, sent)
    payload = b"".join(pieces)
    assert orjson.loads(payload) == sent
    assert payload.startswith(raw.rstrip()[:-1] + b",")  # the client's bytes, not re-encoded
    assert pieces[0].obj is raw  # type: ignore[union-attr]  # ... and not copied
    assert sent.keys() - client.keys() == {"logprobs", "top_logprobs", "return_token_ids",
                                           "seed", "stream_options"}


def test_a_key_the_client_sent_and_the_router_changed_means_re_encoding() -> None:
    client = {**CHAT, "seed": None, "stream_options": {"continuous_usage_stats": False}}
    raw = orjson.dumps(client)
    sent = _sent(client)
    payload = b"".join(arm_payload(raw, client, sent))
    assert orjson.loads(payload) == sent
    assert payload == orjson.dumps(sent)
    assert sent["seed"] == SETTINGS.default_seed
    assert sent["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}


def test_nothing_added_sends_the_clients_bytes_unchanged() -> None:
    raw = b'{"model": "m", "messages": []}'
    client = orjson.loads(raw)
    assert arm_payload(raw, client, dict(client)) == (raw,)


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)  # JSON-encodable
INTS = st.integers(-(2**63), 2**63 - 1)


@given(st.dictionaries(TEXT, st.none() | INTS | TEXT, min_size=1, max_size=6),
       st.dictionaries(TEXT, st.booleans() | INTS, max_size=4),
       st.sampled_from([b"", b"\n", b"  "]))
def test_arms_always_parse_exactly_sent(client: dict[str, Any], extra: dict[str, Any],
                                        tail: bytes) -> None:
    raw = orjson.dumps(client) + tail
    parsed = orjson.loads(raw)
    sent = {**parsed, **extra}
    assert orjson.loads(b"".join(arm_payload(raw, parsed, sent))) == sent
