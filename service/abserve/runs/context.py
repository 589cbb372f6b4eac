"""One run's context: what every step of ``abserve run`` reads, handed over as one object.

Locust hands one ``Environment`` to every part; ``abserve run`` does the same with
``RunContext``: the experiment, where its files go, its run id and console, and (filled as the
run starts them) the model, the arms' servers and checks, and the router.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from abserve.arms.arm_checks import ArmFacts
    from abserve.arms.run_paths import RunPaths
    from abserve.arms.server import VllmServer
    from abserve.config import ExperimentConfig
    from abserve.runs.router_process import RouterProcess


@dataclass
class RunContext:
    """The run's facts, fixed once known; ``router`` is set while the router runs."""

    config: ExperimentConfig
    config_path: Path
    paths: RunPaths
    run_id: str
    console: Console
    model: Path | None = None
    servers: dict[str, VllmServer] = field(default_factory=dict)
    facts: dict[str, ArmFacts] = field(default_factory=dict)
    router: RouterProcess | None = None

    def running_router(self) -> RouterProcess:
        """The router the load goes through (started by ``run_experiment``)."""
        if self.router is None:
            raise RuntimeError("the run's router has not been started")
        return self.router
