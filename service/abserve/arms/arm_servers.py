"""From an experiment's arms to running servers: one ``VllmServer`` (or ``ExternalServer``) per arm.

A managed arm's server runs ``server:`` (the flags every arm shares) plus the arm's own
``args`` (which win, being later on the command line) and ``env``, under the arm's interpreter,
pinned to its CPUs of the first block, with abserve's plugin selected when the arm names a
``lookup``. An external arm is only waited for. ``prove_arms`` sends one multimodal probe to
every arm and refuses to go on unless each arm with a ``lookup`` proved it inside its worker's
gather step; arms without one are reported as unproven (the policy decides whether that
invalidates the run). ``router_arms`` gives the router its arms: URLs and roles in the router's
file, and (only when some arm has a key) the same arms with their keys for the router's
environment, never for a file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from abserve.arms.server import ExternalServer, ServerSpec, VllmServer
from abserve.model.arms import render_args, resolve
from abserve.model.telemetry import prove_lookup

if TYPE_CHECKING:
    from rich.console import Console

    from abserve.config import ExperimentConfig, ServerConfig


class ArmProofError(RuntimeError):
    """An arm with a lookup did not prove it."""


def shared_spec(server: ServerConfig, model_path: Path, served_name: str) -> ServerSpec:
    """The server settings every managed arm shares (``server:``)."""
    return ServerSpec(
        model=str(model_path), served_model_name=served_name, max_model_len=server.max_model_len,
        dtype=server.dtype, max_num_batched_tokens=server.max_num_batched_tokens,
        max_images=server.max_images, kv_cache_memory_bytes=server.kv_cache_memory_bytes,
        enforce_eager=server.enforce_eager, prefix_caching=server.prefix_caching, seed=server.seed,
        lookup_scope=server.lookup_scope, extra_args=render_args(server.args), env=resolve(server.env),
        startup_timeout_s=server.startup_timeout_s,
    )


def arm_spec(config: ExperimentConfig, model_path: Path, name: str) -> ServerSpec:
    """One managed arm's server settings: ``server:`` with the arm's args appended (they win)."""
    spec = shared_spec(config.server, model_path, config.model.served_name)
    arm = config.arms[name]
    return spec.model_copy(update={"extra_args": [*spec.extra_args, *arm.argv()]})


def full_argv(config: ExperimentConfig, model_path: Path) -> dict[str, list[str]]:
    """Every managed arm's whole server command line (for vLLM's own parser, before starting)."""
    return {name: arm_spec(config, model_path, name).args(8000)
            for name, arm in config.arms.items() if arm.kind == "managed"}


def make_servers(config: ExperimentConfig, model_path: Path, placement: dict[str, tuple[int, ...]],
                 log: Callable[[str], Path], telemetry: Callable[[str], Path]) -> dict[str, VllmServer]:
    """One server per arm; managed ones pinned to ``placement`` (the first block's)."""
    servers: dict[str, VllmServer] = {}
    for name, arm in config.arms.items():
        spec = arm_spec(config, model_path, name)
        if arm.kind == "external":
            key = resolve({"k": f"${{{arm.api_key_env}}}"})["k"] if arm.api_key_env else None
            servers[name] = ExternalServer(name, spec, None, log(f"vllm-{name}"), None,
                                           external_url=arm.url or "", api_key=key)
            continue
        servers[name] = VllmServer(
            name, spec, arm.lookup, log(f"vllm-{name}"), telemetry(name),
            cpus=placement.get(name) or None, extra_env=arm.server_env(),
            python=None if arm.own_python else str(arm.interpreter),
        )
    return servers


def prove_arms(config: ExperimentConfig, servers: dict[str, VllmServer], console: Console,
               probe: Callable[[str], dict[str, object]], flush_s: float = 1.2) -> None:
    """Each arm with a lookup must prove it inside the gather step before any load is sent."""
    body = probe(config.model.served_name)
    for name, server in servers.items():
        if config.arms[name].expected_mode is None:
            continue
        response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300)
        if response.status_code != 200:
            raise ArmProofError(f"probe request to arm {name} failed: HTTP {response.status_code}")
    time.sleep(flush_s)  # one telemetry flush
    for name, server in servers.items():
        expected = config.arms[name].expected_mode
        if expected is None:
            console.print(f"arm {name} ({config.arms[name].kind}): [yellow]unproven[/] (no lookup to prove)")
            continue
        proof = prove_lookup(server.telemetry(), expected)
        if not proof.ok:
            raise ArmProofError(f"arm {name} did not prove lookup {expected!r}: {proof.detail}")
        console.print(f"[green]arm {name}[/] proved [bold]{proof.proven}[/]: {proof.detail}")


def router_arms(config: ExperimentConfig, servers: dict[str, VllmServer]
                ) -> tuple[dict[str, dict[str, str]], str | None]:
    """The router's arms for its file, and the ``ABSERVE_ROUTER_ARMS`` value (arms with their
    keys, JSON) for its environment when some external arm has a key; else None."""
    public = {name: {"url": server.url, "role": str(config.arms[name].role)}
              for name, server in servers.items()}
    keys = {name: server.api_key for name, server in servers.items()
            if isinstance(server, ExternalServer) and server.api_key}
    if not keys:
        return public, None
    secret = {name: {**arm, **({"api_key": keys[name]} if name in keys else {})}
              for name, arm in public.items()}
    return public, json.dumps(secret)


def tokenize_url(config: ExperimentConfig, servers: dict[str, VllmServer]) -> str:
    """A server the load generator may ask ``/tokenize``: the baseline when abserve started it,
    else the first managed arm, else the baseline."""
    managed = [n for n, a in config.arms.items() if a.kind == "managed"]
    name = config.baseline if config.baseline in managed or not managed else managed[0]
    return servers[name].url
