"""The docker compose target: arms that compose starts, run by the same ``abserve run``.

Where an experiment's arms run is a *target* behind one contract (``abserve.arms.server``'s
``VllmServer``: ``start`` with a telemetry root, ``wait_ready`` until healthy, ``url``,
``telemetry`` for the proof, ``stop``, ``tree`` for the watch and the neighbour sampler). Three
targets implement it: local processes (``VllmServer``, the default), external endpoints
(``ExternalServer``, ``url:`` arms) and docker compose (``ComposeServer``, here).

Under compose (``abserve run --target compose``, what the stack's ``orchestrator`` service
runs) every arm is the service ``vllm-<arm>`` of the stack: compose starts it from the arm's
image with the arm's args, lookup and mutant (``abserve.deploy.compose_env`` writes them into
compose's environment) and waits for its health check; this process only waits for
``/health``, proves it from the telemetry volume the arm writes into
(``<out>/telemetry/<arm>``, the run's folder shared by the arm and the orchestrator), and
records what identifies it: the command line its API server saw, its vLLM version and the
image it ran (``ABSERVE_ARM_IMAGES``, written by ``scripts/signoff.sh``). Stopping is
compose's: the orchestrator exits and ``docker compose up --exit-code-from orchestrator``
stops the stack. Rounds, early stop, traffic files, the live view, proofs, the report:
everything else is the one orchestrator's (``abserve.runs.orchestrator``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abserve.arms.run_paths import RunRefused
from abserve.arms.server import ExternalServer, ServerSpec
from abserve.model.telemetry import ProcessTelemetry

if TYPE_CHECKING:
    from abserve.config import ExperimentConfig

ARM_PORT = 8000
IMAGES_ENV = "ABSERVE_ARM_IMAGES"  # "a=abserve/vllm-a:tag@sha256:... b=..." (scripts/signoff.sh)
TARGETS = ("local", "compose")


def arm_url(arm: str) -> str:
    """The URL of an arm's server inside the compose network (its service ``vllm-<arm>``)."""
    return f"http://vllm-{arm}:{ARM_PORT}"


def arm_images(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Each arm's image as ``scripts/signoff.sh`` built it (reference and image id)."""
    raw = (os.environ if environ is None else environ).get(IMAGES_ENV, "")
    pairs = (word.split("=", 1) for word in raw.split() if "=" in word)
    return {arm: image for arm, image in pairs}


@dataclass
class ComposeServer(ExternalServer):
    """An arm compose runs: waited for on ``/health``, proven from its telemetry volume."""

    image: str | None = None

    ready_path = "/health"  # the compose health check's own probe

    def ready_timeout_s(self) -> float:
        """Compose waited for the arm's health check already; waiting as long as a start may
        take covers an orchestrator started by hand (``docker compose run``) before its arms."""
        return self.spec.startup_timeout_s

    def not_ready(self, last: str) -> str:
        return (f"compose arm '{self.name}' (service vllm-{self.name}) not healthy at {self.url}: "
                f"{last}; see `docker compose logs vllm-{self.name}`")


def compose_servers(config: ExperimentConfig, telemetry: Callable[[str], Path],
                    log: Callable[[str], Path]) -> dict[str, ComposeServer]:
    """One ``ComposeServer`` per arm: its service's URL, its telemetry under the run's folder."""
    from abserve.arms.arm_servers import shared_spec

    if external := [name for name, arm in config.arms.items() if arm.kind == "external"]:
        raise RunRefused(f"arms {external} are url: endpoints; under docker compose every arm is a "
                         "service vllm-<arm> of the stack (judge endpoints with `abserve run` outside it)")
    spec: ServerSpec = shared_spec(config.server, Path(config.model.id or config.model.served_name),
                                   config.model.served_name)
    images = arm_images()
    return {
        name: ComposeServer(name, spec, arm.lookup, log(f"vllm-{name}"), telemetry(name),
                            external_url=arm_url(name), image=images.get(name) or arm.image)
        for name, arm in config.arms.items()
    }


def server_identity(records: list[ProcessTelemetry]) -> dict[str, Any]:
    """What identifies an arm from its telemetry: the API server's command line as that
    process saw it, the vLLM version, the worker's determinism settings at its last flush."""
    api = [r for r in records if r.role == "api_server" and r.argv]
    workers = [r for r in records if r.role == "worker"] or [r for r in records if r.role != "api_server"]
    latest = max(workers, key=lambda r: r.updated_at, default=None)
    return {
        "server_args": list(api[0].argv[1:]) if api else [],
        "vllm_version": next((r.vllm_version for r in records if r.vllm_version), None),
        "environment": dict(latest.environment) if latest else {},
    }
