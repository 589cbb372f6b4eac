"""What the router asks of every arm beyond the client's request, and how it hides that.

To compare arms token by token the router needs token ids and top-k logprobs from each,
and the same sampling seed. vLLM 0.32's request fields for that: chat
``logprobs: true`` + ``top_logprobs: k``; completions ``logprobs: k``; both
``return_token_ids: true``, ``seed``, and ``stream_options.include_usage`` for usage in
a stream. ``augment`` adds only what the client did not ask for and returns the
``Additions``; the client then receives the primary's answer with exactly those fields
put back to what vLLM sends when they are not requested (``null``), and the usage-only
final chunk dropped when the client did not ask for it. A client that asked for
everything gets the primary's bytes untouched (``Additions.any`` is False).

Sampled requests (``seeded_sampling``). Arms are compared token by token, so a sampled
request must reach every arm with the same seed; but a seed makes vLLM give the request its
own generator, and vLLM on CPU then kills the engine ("CPU Generator does not use offset")
as soon as such a request's prompt is prefilled in more than one chunk. The router cannot
tell a CPU arm from a GPU arm, so the choice is a setting, and the default is the safe one:
``seeded_sampling: refuse`` answers every request that vLLM would sample (``temperature``
unset, since the OpenAI default samples, or at least vLLM's greedy threshold 1e-5) with a
400 that says to send ``temperature: 0``; no arm is called. ``seeded_sampling: allow``
(arms whose vLLM seeds sampling safely, e.g. GPU hosts) forwards them with the same seed to
every arm (the client's, else ``default_seed`` under ``seed_policy: fixed``; under
``seed_policy: none`` a sampled request without a seed is a 400, its arms' answers could not
be compared). Greedy
requests are always forwarded; their seed is harmless (vLLM creates no generator).

Known difference: a vLLM started with a ``system_fingerprint`` stamps it on the last
content chunk only when no usage chunk follows; with added usage it rides on the
dropped usage chunk instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from abserve.openai_request.errors import RouterError
from abserve.openai_request.validation import CheckedRequest, Endpoint
from abserve.router.settings import RouterSettings

SAMPLING_REFUSED = (
    "sampled requests are refused by this router (seeded_sampling: refuse): its arms may "
    "not survive a seeded sampled request (vLLM on CPU), and unseeded samples cannot be "
    "compared between arms. Send temperature 0 (an unset temperature samples).")
SAMPLING_UNSEEDED = (
    "a sampled request needs a seed here (seed_policy: none): without one the arms' samples "
    "cannot be compared. Send a seed, or temperature 0.")


@dataclass(frozen=True)
class Additions:
    """Which response fields exist only because the router asked for them."""

    logprobs: bool = False
    token_ids: bool = False
    usage: bool = False

    @property
    def any(self) -> bool:
        return self.logprobs or self.token_ids or self.usage


def check_sampling(checked: CheckedRequest, settings: RouterSettings) -> None:
    """400 for a request vLLM would sample, unless the arms allow seeded sampling."""
    if not checked.sampled:
        return
    if settings.seeded_sampling == "refuse":
        raise RouterError(400, SAMPLING_REFUSED, param="temperature")
    if settings.seed_policy == "none" and checked.body.get("seed") is None:
        raise RouterError(400, SAMPLING_UNSEEDED, param="seed")


def augment(body: dict[str, Any], endpoint: Endpoint, settings: RouterSettings) -> Additions:
    """Add the fields every arm must answer with (in place); say which were added."""
    k = settings.top_logprobs
    logprobs = False
    if endpoint == "chat/completions":
        if not body.get("logprobs") and k > 0:
            body["logprobs"], body["top_logprobs"], logprobs = True, k, True
    elif body.get("logprobs") is None and k > 0 and not body.get("echo"):
        body["logprobs"], logprobs = k, True
    token_ids = not body.get("return_token_ids")
    if token_ids:
        body["return_token_ids"] = True
    if settings.seed_policy == "fixed" and body.get("seed") is None:
        body["seed"] = settings.default_seed
    usage = False
    options = body.get("stream_options")
    asked = isinstance(options, dict) and options.get("include_usage")
    if body.get("stream") and settings.request_usage and not asked:
        body["stream_options"] = {**(options or {}), "include_usage": True}
        usage = True
    return Additions(logprobs=logprobs, token_ids=token_ids, usage=usage)


def _null_keys(obj: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in obj:
            obj[key] = None


def strip(response: dict[str, Any], additions: Additions) -> dict[str, Any] | None:
    """The chunk or body as the client would get it directly; None means drop the chunk."""
    choices = response.get("choices")
    if additions.usage and choices == [] and "usage" in response:
        return None
    if additions.token_ids:
        _null_keys(response, ("prompt_token_ids",))
    for choice in choices or ():
        if additions.token_ids:
            _null_keys(choice, ("token_ids", "prompt_token_ids"))
        if additions.logprobs:
            _null_keys(choice, ("logprobs",))
    return response
