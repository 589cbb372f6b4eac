"""Where one ``abserve run`` keeps its files, and the error that ends a run.

Shared by the orchestrator and the pieces it drives (the router process, the load plan), so
none of them imports the orchestrator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class RunError(RuntimeError):
    """The run cannot go on; the message says why and what to look at."""


class LoadStopped(RunError):
    """The load stopped before it had sent its requests (``abserve.traffic.runner``): at its
    error-rate limit (exit 6, as ``abserve load``'s), a lost worker (7), else invalid (3)."""

    def __init__(self, message: str, stop_reason: str | None, profile: str | None = None) -> None:
        super().__init__(message)
        self.stop_reason, self.profile = stop_reason, profile
        self.exit_code = {"error_rate": 6, "worker_lost": 7}.get(stop_reason or "", 3)

    def describe(self) -> str:
        """Why the run is invalid, in the words its report gives."""
        what = {6: "the load stopped at its error-rate limit (exit 6)",
                7: "a load worker was lost (exit 7)"}.get(self.exit_code, "the load stopped before its end")
        return f"{what}: {self}"


class RunRefused(RunError):
    """The run was refused before anything started (its config, its arms, the machine's run lock):
    a tool error (exit 4), not an invalid run."""


@dataclass
class RunPaths:
    out: Path
    database: str | None = None  # the store's URL; None: SQLite in ``out``

    @property
    def database_url(self) -> str:
        return self.database or f"sqlite:///{(self.out / 'abserve.db').resolve()}"

    def log(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.log"

    def telemetry(self, arm: str) -> Path:
        return self.out / "telemetry" / arm
