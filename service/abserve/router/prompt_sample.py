"""Prompt logprobs on a sample of exchanges: a check that sees faults no output token shows.

A fault in how one image is embedded changes the logprob of every prompt token after that
image, even when every output token stays the same (issue 9). So on a configurable
fraction of exchanges the router asks every arm, at the same instant, for the prompt
logprobs of the request it just answered, and records them in
``ArmOutcome.prompt_logprobs`` for the judgment to compare.

Why a separate probe and not an added request field: vLLM 0.32 refuses ``prompt_logprobs``
on streamed requests ("not available when stream=True"), and the load is streamed. The
probe is the client's request made non-streamed with ``max_tokens: 1`` and
``prompt_logprobs: k``; it goes out after every arm finished the measured exchange, so the
measured requests are untouched, and its answer never reaches the client. vLLM returns
the prompt logprobs at the top level of a chat response and per choice of a completions
response: one entry per prompt token (``null`` for the first), each a map from token id
to ``{logprob, rank, decoded_token}`` holding the prompt's own token and the top ``k``.

The decision is a pure function of the request fingerprint, so a request repeated in
another run is sampled the same way. Recorded position ``i`` is prompt token ``i + 1``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from abserve.model.records import ArmOutcome, PositionLogprobs, TopLogprob
from abserve.openai_request.validation import Endpoint
from abserve.router.fanout import ArmCall
from abserve.router.upstream import UpstreamError

log = logging.getLogger("abserve.router")
_SPACE = 16**16  # the first 16 hex digits of the fingerprint, as a fraction of this


def sampled(fingerprint: str, fraction: float) -> bool:
    """Whether the exchange with this (hex digest) fingerprint gets a prompt-logprob probe."""
    if fraction <= 0.0:
        return False
    if fraction >= 1.0:
        return True
    return int(fingerprint[:16], 16) < fraction * _SPACE


def probe_body(body: dict[str, Any], endpoint: Endpoint, k: int) -> dict[str, Any]:
    """The client's request as a non-streamed one-token request for prompt logprobs."""
    probe = {key: value for key, value in body.items()
             if key not in ("stream", "stream_options", "logprobs", "top_logprobs", "echo",
                            "max_completion_tokens", "min_tokens", "n", "best_of")}
    probe.update(max_tokens=1, prompt_logprobs=k, return_token_ids=True)
    if endpoint == "chat/completions":
        probe["logprobs"] = False
    return probe


def parse(response: dict[str, Any], endpoint: Endpoint, k: int) -> list[PositionLogprobs] | None:
    """The prompt logprobs of a probe's answer (position ``i`` = prompt token ``i + 1``; the
    top ``k`` candidates by rank in ``top``); None when the answer carries none."""
    holder = response
    if endpoint == "completions":
        choices = response.get("choices") or [{}]
        holder = choices[0] if isinstance(choices[0], dict) else {}
    entries, ids = holder.get("prompt_logprobs"), holder.get("prompt_token_ids")
    if not isinstance(entries, list) or not isinstance(ids, list) or len(ids) != len(entries):
        return None
    out = []
    for token_id, entry in zip(ids, entries, strict=True):
        if entry is None:
            continue
        out.append(_position(int(token_id), entry, k))
    return out


def _position(token_id: int, entry: dict[str, Any], k: int) -> PositionLogprobs:
    own = entry.get(str(token_id)) or {}
    ranked = sorted(((int(key), value) for key, value in entry.items()),
                    key=lambda kv: kv[1].get("rank") or 0)
    top = [TopLogprob(token=value.get("decoded_token") or "", logprob=float(value["logprob"]),
                      token_id=key)
           for key, value in ranked if (value.get("rank") or 0) <= k]
    return PositionLogprobs(token=own.get("decoded_token") or "",
                            logprob=float(own.get("logprob", float("-inf"))),
                            token_id=token_id, top=top)


async def _ask(call: ArmCall, payload: bytes, endpoint: Endpoint,
               k: int) -> list[PositionLogprobs] | None:
    try:
        async with asyncio.timeout(call.deadlines.total_s):
            response = await call.client.post(call.path, payload, headers=call.headers)
        if response.status_code != 200:
            log.warning("prompt-logprob probe: arm %s answered HTTP %d",
                        call.outcome.arm, response.status_code)
            return None
        return parse(orjson.loads(response.content), endpoint, k)
    except (TimeoutError, UpstreamError, orjson.JSONDecodeError, ValueError, KeyError) as exc:
        log.warning("prompt-logprob probe: arm %s failed: %s", call.outcome.arm,
                    type(exc).__name__)
        return None


async def probe(calls: dict[str, ArmCall], body: dict[str, Any], endpoint: Endpoint,
                k: int) -> dict[str, ArmOutcome]:
    """Ask every arm whose exchange succeeded for the prompt logprobs, all at once; store
    them in each arm's outcome (None where the probe failed). Returns the outcomes."""
    payload = orjson.dumps(probe_body(body, endpoint, k))
    live = {name: call for name, call in calls.items() if call.outcome.ok}
    results = await asyncio.gather(*(_ask(call, payload, endpoint, k) for call in live.values()))
    for call, result in zip(live.values(), results, strict=True):
        call.outcome.prompt_logprobs = result
    return {name: call.outcome for name, call in calls.items()}
