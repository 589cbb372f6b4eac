"""The A/B router: an OpenAI-compatible front that fans every request out to every arm.

Public surface: ``create_app(settings)`` (FastAPI app), ``RouterSettings`` /
``load_settings(path)`` and ``serve(settings)`` (uvicorn, used by ``abserve router``).

``create_app`` is imported on first use: reading the settings (``abserve.config`` does, for
``abserve check``) must not cost FastAPI's import (~0.2 s of CPU) nor need the service extra.
The request checks the router applies are below it, in ``abserve.openai_request``.
"""

from typing import TYPE_CHECKING, Any

from abserve.router.settings import ArmSettings, Deadlines, RouterSettings, load_settings

if TYPE_CHECKING:
    from abserve.router.app import create_app

__all__ = ["ArmSettings", "Deadlines", "RouterSettings", "create_app", "load_settings"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from abserve.router.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
