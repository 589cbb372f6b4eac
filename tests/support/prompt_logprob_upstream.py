"""``FakeUpstream`` that also answers ``prompt_logprobs`` the way vLLM 0.32 does.

vLLM refuses ``prompt_logprobs > 0`` on a streamed request (HTTP 400) and, on a non-streamed
one, returns ``prompt_logprobs`` (a list with ``null`` for the first prompt token, then a map
token id -> ``{logprob, rank, decoded_token}`` holding the prompt's own token and the top k)
next to ``prompt_token_ids``: at the top level of a chat answer, per choice of a completions
answer. Knobs: ``shift_from`` moves every prompt logprob from that position on by
``shift`` (an embedding fault's signature); ``probe_status`` answers prompt-logprob requests
with that HTTP status.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from tests.support.fake_upstream import FakeUpstream, Knobs, _Answer

PROMPT_IDS = [1, 17, 23, 42, 32000, 32000, 32000, 32000, 99, 7]


def prompt_logprobs(k: int, shift_from: int | None, shift: float) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = [None]
    for i, tid in enumerate(PROMPT_IDS[1:], start=1):
        moved = shift if shift_from is not None and i >= shift_from else 0.0
        entry = {str(200 + j): {"logprob": -0.5 * (j + 1) + moved, "rank": j + 1,
                                "decoded_token": f"t{200 + j}"} for j in range(k)}
        entry[str(tid)] = {"logprob": -2.0 - 0.1 * i + moved, "rank": k + 3,
                           "decoded_token": f"p{tid}"}
        out.append(entry)
    return out


class PromptLogprobUpstream(FakeUpstream):
    """A fake vLLM that knows ``prompt_logprobs``."""

    def __init__(self, knobs: Knobs | None = None, shift_from: int | None = None,
                 shift: float = 0.01) -> None:
        super().__init__(knobs)
        self.shift_from, self.shift = shift_from, shift
        self.probe_status = 200

    async def _complete(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        k = body.get("prompt_logprobs")
        if k is None:
            return await super()._complete(request)
        self.observed.requests += 1
        self.observed.bodies.append(body)
        if self.probe_status != 200 or (body.get("stream") and k > 0):
            return JSONResponse({"error": {"message": "refused", "code": 400}},
                                status_code=self.probe_status if self.probe_status != 200 else 400)
        chat = request.url.path.endswith("chat/completions")
        full = _Answer(body, chat, self.knobs).full()
        holder = full if chat else full["choices"][0]
        holder["prompt_logprobs"] = prompt_logprobs(k, self.shift_from, self.shift)
        holder["prompt_token_ids"] = PROMPT_IDS
        return Response(orjson.dumps(full), media_type="application/json")
