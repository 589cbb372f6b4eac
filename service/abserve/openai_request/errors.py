"""OpenAI-style errors: one exception type, one JSON shape, status codes that mean it.

Everything the router refuses (bad JSON, oversize body, forbidden media URL, missing key,
overload, dead primary) is raised as ``RouterError`` and its body is ``error_body``:
``{"error": {"message", "type", "param", "code"}}`` the way OpenAI and vLLM answer (the
router's ``router.errors.error_response`` makes it an HTTP response). The request checks
below the router raise it too, so traffic files and saved runs are refused with the same
messages. Messages are fixed strings plus numbers: never request text, keys or image data.
"""

from __future__ import annotations

import orjson

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class RouterError(Exception):
    """A refusal with an HTTP status; rendered as an OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers or {}


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """The JSON bytes of an OpenAI-style error."""
    err = {"message": message, "type": _TYPES.get(status, "APIError"), "param": param,
           "code": status}
    return orjson.dumps({"error": err})

