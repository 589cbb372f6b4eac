"""The router's error answers: a ``RouterError`` as the HTTP response OpenAI and vLLM give.

The exception and its JSON body live with the request checks (``openai_request.errors``);
this is the one piece that needs starlette.
"""

from __future__ import annotations

from starlette.responses import Response

from abserve.openai_request.errors import RouterError, error_body


def error_response(exc: RouterError) -> Response:
    """The HTTP response for a ``RouterError``."""
    return Response(error_body(exc.status, exc.message, exc.param), status_code=exc.status,
                    media_type="application/json", headers=exc.headers)
