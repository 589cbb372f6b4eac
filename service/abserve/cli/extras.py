"""Which extra a command lacks: one line naming it instead of a traceback.

The base install (pyproject.toml's ``dependencies``) runs every command that needs no server:
check, report, compare, ledger, accept, plan, watch. ``abserve[service]`` adds the router and the
load generator (and PostgreSQL's driver); ``abserve[cpu]`` adds the CPU build of vLLM, which
building the tiny model and starting managed arms need. Every command imports those libraries
inside its body, so a missing one surfaces as ``ModuleNotFoundError`` while the command runs;
``missing_extra`` names the extra that provides it and ``ContractGroup`` prints ``needs_extra``.
"""

from __future__ import annotations

import importlib.util
from typing import Final

SERVICE: Final = "service"
CPU: Final = "cpu"

# Top-level module -> the extra whose install provides it (pyproject.toml's optional-dependencies).
EXTRA_OF: Final[dict[str, str]] = {
    **dict.fromkeys(("fastapi", "uvicorn", "uvloop", "httptools", "msgspec", "psycopg", "locust",
                     "gevent"), SERVICE),
    **dict.fromkeys(("vllm", "torch", "torchvision", "transformers", "tokenizers", "safetensors",
                     "huggingface_hub"), CPU),
}


def require(*modules: str) -> None:
    """Raise ``ModuleNotFoundError`` for the first of MODULES that is not installed.

    For commands that would otherwise reach their extra's libraries only in a child process
    (``abserve load`` runs Locust in one), where a missing one would not surface here.
    """
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def missing_extra(exc: BaseException) -> str | None:
    """The extra that would have provided the module EXC (or what caused it) could not import."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            extra = EXTRA_OF.get(current.name.split(".")[0])
            if extra is not None:
                return extra
        current = current.__cause__ or current.__context__
    return None


def needs_extra(command: str | None, extra: str) -> str:
    """The one line a command missing EXTRA prints."""
    name = f"abserve {command}" if command else "abserve"
    return f"`{name}` needs the {extra} extra: pip install 'abserve[{extra}]'"
