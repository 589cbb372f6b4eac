"""The A/B router: an OpenAI-compatible front that fans every request out to every arm.

Public surface: ``create_app(settings)`` (FastAPI app), ``RouterSettings`` /
``load_settings(path)`` and ``serve(settings)`` (uvicorn, used by ``abserve router``).
"""

from abserve.router.app import create_app
from abserve.router.settings import ArmSettings, Deadlines, RouterSettings, load_settings

__all__ = ["ArmSettings", "Deadlines", "RouterSettings", "create_app", "load_settings"]
