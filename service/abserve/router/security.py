"""Authentication: who may call the router.

``check_bearer``: the client's ``Authorization: Bearer`` key against the configured one,
compared in constant time (``hmac.compare_digest``). No key configured means dev mode. (What
arms may be told to fetch, the media-URL policy, is a request check:
``openai_request.media_urls``.)
"""

from __future__ import annotations

import hmac

from pydantic import SecretStr

from abserve.openai_request.errors import RouterError


def check_bearer(authorization: str | None, api_key: SecretStr | None) -> None:
    """Raise 401 unless ``authorization`` carries the configured key (constant time)."""
    if api_key is None:
        return
    scheme, _, token = (authorization or "").partition(" ")
    expected = api_key.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
        raise RouterError(401, "missing or invalid API key",
                          headers={"WWW-Authenticate": "Bearer"})
