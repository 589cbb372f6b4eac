"""GPU preflight: refuse a GPU sign-off the host cannot run, before any image is pulled or built.

``abserve check CONFIG --gpu`` (and ``scripts/signoff.sh`` before its first ``docker compose
build``) runs it. A GPU sign-off otherwise learns of a missing NVIDIA runtime, a GPU id that
does not exist, arms that do not fit their GPU's memory, a GPU too old for batch invariance or
an unpinned release model only after pulling several GB of images, minutes into the stack's
start. Each refusal here is one line naming what to change.

Where the inputs come from (``docker-compose.yml``): each arm ``<arm>`` runs on the GPU
``ABSERVE_GPU_<ARM>`` (default ``0``) with ``--gpu-memory-utilization
${ABSERVE_GPU_MEMORY_UTILIZATION}`` (default ``0.28``, the same fraction for every arm), read
from the shell's environment first, then from the env file (``.env``), as compose interpolates
them. The config gives the model, ``--max-model-len``, ``server.env`` (batch invariance) and
the arms' images (what makes it a release sign-off).

The checks are pure functions over the probes' parsed output (``nvidia-smi --query-gpu``,
``docker info --format '{{json .Runtimes}}'``); ``probe_host`` and ``run_preflight`` are the
thin shell that runs the probes and reads the files.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from abserve.deploy.compose_env import ComposeExperiment, load_experiment

GPU_QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,driver_version",
             "--format=csv,noheader,nounits"]
DOCKER_RUNTIMES = ["docker", "info", "--format", "{{json .Runtimes}}"]
DEFAULT_GPU = "0"  # docker-compose.yml: device_ids: ["${ABSERVE_GPU_<ARM>:-0}"]
DEFAULT_FRACTION = "0.28"  # docker-compose.yml: ${ABSERVE_GPU_MEMORY_UTILIZATION:-0.28}
FRACTION_VAR = "ABSERVE_GPU_MEMORY_UTILIZATION"
# vLLM checks each arm's fraction of the GPU against the memory free when that arm starts; the
# driver and every CUDA context keep some outside the fractions, so arms on one GPU get 95% in all.
MAX_SHARED = 0.95
BATCH_INVARIANT_MIN_CC = (8, 0)  # vLLM 0.32+: batch-invariant kernels need Ampere or newer
COMMIT = re.compile(r"[0-9a-f]{40}")
# The images' CUDA 13 (vllm/vllm-openai since vLLM 0.20; abserve pins v0.33.0) needs driver 580.65.06+.
MIN_DRIVER = (580, 65, 6)
DRIVER = re.compile(r"\d+(\.\d+){0,2}")
OVERHEAD_GIB = 3.0  # activations of the profile run, CUDA graphs, the CUDA context
NUMBERS = {1: "one", 2: "two", 3: "three"}


class PreflightRefused(ValueError):
    """The host or config cannot run this GPU sign-off; the message is the one line to print."""


class Gpu(BaseModel):
    """One GPU as ``nvidia-smi`` lists it."""

    model_config = ConfigDict(frozen=True)
    index: int
    name: str
    memory_mib: int
    compute_cap: tuple[int, int]
    driver: str  # the NVIDIA driver's version, as nvidia-smi prints it (580.95.05)

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    def label(self) -> str:
        return f"GPU {self.index} ({self.name}, {self.memory_gib:.0f} GiB)"


class Placement(BaseModel):
    """One arm's GPU and memory fraction, as docker-compose.yml will start it."""

    model_config = ConfigDict(frozen=True)
    arm: str
    gpu: int
    fraction: float
    max_model_len: int | None = None


class Footprint(BaseModel):
    """What one arm of a known model needs: bf16 weights, KV cache per token, native context."""

    weights_gib: float
    kv_bytes_per_token: int  # 2 (K, V) x layers x KV heads x head dim x 2 bytes
    context: int

    def need_gib(self, max_model_len: int | None) -> float:
        """Weights, the KV cache of one request of the full length (vLLM refuses less), overhead."""
        kv = self.kv_bytes_per_token * (max_model_len or self.context) / 2**30
        return self.weights_gib + kv + OVERHEAD_GIB


# Qwen2.5-VL: 3B has 36 layers x 2 KV heads x 128, 7B 28 layers x 4 KV heads x 128.
FOOTPRINTS: dict[str, Footprint] = {
    "qwen/qwen2.5-vl-3b-instruct": Footprint(weights_gib=7.0, kv_bytes_per_token=36_864, context=128_000),
    "qwen/qwen2.5-vl-7b-instruct": Footprint(weights_gib=15.5, kv_bytes_per_token=57_344, context=128_000),
}


class Probe(BaseModel):
    """What one probe command did: not found, or its exit code and output."""

    found: bool = True
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""

    def first_line(self) -> str:
        lines = [line.strip() for line in (self.stderr + "\n" + self.stdout).splitlines()]
        return next((line for line in lines if line), "no output")


class HostProbes(BaseModel):
    """The host's answers to both probes."""

    nvidia_smi: Probe
    docker: Probe


# ---- parsing ---------------------------------------------------------------------------------


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs of ``nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version``
    (csv, no units; a name may hold commas)."""
    gpus = []
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 5:
            raise PreflightRefused(f"cannot read nvidia-smi's GPU line {line!r}")
        index, name, memory, cap = fields[0], ", ".join(fields[1:-3]), fields[-3], fields[-2]
        try:
            major, _, minor = cap.partition(".")
            gpus.append(Gpu(index=int(index), name=name, memory_mib=int(float(memory)),
                            compute_cap=(int(major), int(minor or 0)), driver=fields[-1]))
        except ValueError:
            raise PreflightRefused(f"cannot read nvidia-smi's GPU line {line!r}") from None
    return gpus


def parse_runtimes(text: str) -> set[str]:
    """The runtime names of ``docker info --format '{{json .Runtimes}}'``."""
    try:
        runtimes = json.loads(text or "null")
    except json.JSONDecodeError:
        raise PreflightRefused(f"cannot read docker info's runtimes {text.strip()[:80]!r}") from None
    return set(runtimes) if isinstance(runtimes, dict) else set()


def read_env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines of a compose env file (comments, ``export`` and quotes allowed)."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


# ---- pure checks -------------------------------------------------------------------------------


def gpu_var(arm: str) -> str:
    """The variable docker-compose.yml reads an arm's GPU from (``ABSERVE_GPU_A2`` for ``a2``)."""
    return "ABSERVE_GPU_" + re.sub(r"\W", "_", arm).upper()


def placements(experiment: ComposeExperiment, env: Mapping[str, str]) -> list[Placement]:
    """Each arm's GPU and fraction, from ``env`` as compose interpolates it (empty: the default)."""
    fraction_text = env.get(FRACTION_VAR) or DEFAULT_FRACTION
    try:
        fraction = float(fraction_text)
    except ValueError:
        raise PreflightRefused(f"{FRACTION_VAR}={fraction_text!r} is not a number") from None
    if not 0 < fraction <= 1:
        raise PreflightRefused(f"{FRACTION_VAR}={fraction_text} must be above 0 and at most 1")
    out = []
    for arm in experiment.arms:  # a, b, a2 and any further arm: vllm-<arm>, ABSERVE_GPU_<ARM>
        var = gpu_var(arm)
        gpu = env.get(var) or DEFAULT_GPU
        if not gpu.isdigit():
            raise PreflightRefused(f"{var}={gpu!r}: give the GPU's index as nvidia-smi lists it (0, 1, ...)")
        length = experiment.arms[arm].args.get("--max-model-len",
                                                experiment.server.args.get("--max-model-len"))
        out.append(Placement(arm=arm, gpu=int(gpu), fraction=fraction,
                             max_model_len=length if isinstance(length, int) else None))
    return out


def check_runtime(probes: HostProbes) -> list[Gpu]:
    """The host's GPUs, or a refusal: no ``nvidia-smi``, a failing one, Docker without ``nvidia``."""
    smi = probes.nvidia_smi
    if not smi.found:
        raise PreflightRefused("no NVIDIA runtime: nvidia-smi is not on PATH (install the NVIDIA "
                               "driver, 580 or newer; docs/gpu.md)")
    if smi.returncode != 0:
        raise PreflightRefused(f"no NVIDIA runtime: nvidia-smi failed (exit {smi.returncode}): "
                               f"{smi.first_line()}")
    gpus = parse_gpus(smi.stdout)
    if not gpus:
        raise PreflightRefused("no NVIDIA runtime: nvidia-smi lists no GPU")
    docker = probes.docker
    if not docker.found:
        raise PreflightRefused("docker is not on PATH: the GPU sign-off runs under Docker with the "
                               "NVIDIA Container Toolkit (docs/gpu.md)")
    if docker.returncode != 0:
        raise PreflightRefused(f"docker info failed (exit {docker.returncode}): {docker.first_line()}")
    runtimes = parse_runtimes(docker.stdout)
    if "nvidia" not in runtimes:
        raise PreflightRefused(
            f"no NVIDIA runtime in Docker: docker info lists {', '.join(sorted(runtimes)) or 'none'}; "
            "install the NVIDIA Container Toolkit, run `sudo nvidia-ctk runtime configure "
            "--runtime=docker` and restart Docker")
    return gpus


def driver_version(text: str) -> tuple[int, ...]:
    """``580.65.06`` as ``(580, 65, 6)``; a refusal for what no driver prints."""
    if not DRIVER.fullmatch(text):
        raise PreflightRefused(f"cannot read nvidia-smi's driver version {text!r} (expected a "
                               "version such as 580.65.06)")
    return tuple(int(part) for part in text.split("."))


def check_driver(gpus: list[Gpu]) -> str:
    """The driver's line, or a refusal: older than the images' CUDA 13 needs."""
    oldest = min(gpus, key=lambda gpu: driver_version(gpu.driver))
    need = ".".join(f"{part:02d}" if i else str(part) for i, part in enumerate(MIN_DRIVER))
    if driver_version(oldest.driver) < MIN_DRIVER:
        raise PreflightRefused(
            f"NVIDIA driver {oldest.driver} is older than {need}, the minimum of CUDA 13 that the "
            "vLLM images are built with (vllm/vllm-openai since v0.20): update the driver to the 580 "
            "branch or newer (docs/gpu.md Requirements)")
    return f"NVIDIA driver {oldest.driver} (CUDA 13 needs {need} or newer)"


def _arms(group: list[Placement]) -> str:
    count = NUMBERS.get(len(group), str(len(group)))
    return f"{count} arm{'s' if len(group) > 1 else ''} ({', '.join(p.arm for p in group)})"


def check_placement(group: list[Placement], gpu: Gpu, model_id: str) -> str:
    """The line for the arms sharing ``gpu``, or a refusal: over-committed, or too small."""
    share = sum(p.fraction for p in group)
    each = group[0].fraction
    where = f"{_arms(group)} at {each:g} of GPU {gpu.index}"
    if share > MAX_SHARED + 1e-9:
        raise PreflightRefused(
            f"{where} need {share:.0%} of its {gpu.memory_gib:.0f} GiB, at most {MAX_SHARED:.0%} "
            f"fits (vLLM sizes each arm from the memory free when it starts): lower {FRACTION_VAR} "
            "or give the arms their own GPUs (ABSERVE_GPU_<ARM>)")
    footprint = FOOTPRINTS.get(model_id.lower())
    head = f"GPU {gpu.index} ({gpu.name}, {gpu.memory_gib:.0f} GiB, compute capability " \
           f"{gpu.compute_cap[0]}.{gpu.compute_cap[1]}): {_arms(group)} at {each:g} each, {share:.0%} of it"
    if footprint is None:
        return f"{head} (no memory estimate for {model_id}: only the fractions are checked)"
    need = max(footprint.need_gib(p.max_model_len) for p in group)
    if each * gpu.memory_gib < need:
        fits = math.floor(MAX_SHARED / len(group) * 100) / 100
        hint = (f"raise {FRACTION_VAR} (at most {fits:.2f} for {_arms(group)})"
                if need <= fits * gpu.memory_gib else
                "give each arm its own GPU (ABSERVE_GPU_<ARM>)"
                if need <= MAX_SHARED * gpu.memory_gib else "this model needs a larger GPU")
        raise PreflightRefused(
            f"{where} need {share:.0%} of a {math.ceil(need / each)} GiB GPU ({need:.1f} GiB each "
            f"for {model_id}), GPU {gpu.index} ({gpu.name}) has {gpu.memory_gib:.0f} GiB: {hint}")
    return f"{head}, {each * gpu.memory_gib:.1f} GiB per arm (about {need:.1f} needed)"


def check_gpus(experiment: ComposeExperiment, arms: list[Placement], gpus: list[Gpu]) -> list[str]:
    """One line per GPU in use, or a refusal: a missing GPU, too little memory, too old a GPU."""
    by_index = {gpu.index: gpu for gpu in gpus}
    for placement in arms:
        if placement.gpu not in by_index:
            have = ", ".join(str(i) for i in sorted(by_index))
            raise PreflightRefused(
                f"arm {placement.arm} is placed on GPU {placement.gpu} "
                f"({gpu_var(placement.arm)}={placement.gpu}), this host has {len(gpus)} "
                f"GPU{'s' if len(gpus) > 1 else ''} ({have})")
    model_id = experiment.model.id or ""
    lines = []
    for index in sorted({p.gpu for p in arms}):
        group = [p for p in arms if p.gpu == index]
        lines.append(check_placement(group, by_index[index], model_id))
        check_compute(experiment, group, by_index[index])
    return lines


def check_compute(experiment: ComposeExperiment, group: list[Placement], gpu: Gpu) -> None:
    """Batch invariance (``VLLM_BATCH_INVARIANT=1``) needs compute capability 8.0 or newer."""
    if experiment.server.env.get("VLLM_BATCH_INVARIANT", "0") != "1":
        return
    if gpu.compute_cap < BATCH_INVARIANT_MIN_CC:
        major, minor = gpu.compute_cap
        raise PreflightRefused(
            f"VLLM_BATCH_INVARIANT=1 (server.env) needs compute capability 8.0 or newer; "
            f"{gpu.label()}, {_arms(group)}, has {major}.{minor}: set VLLM_BATCH_INVARIANT: \"0\" "
            "in the config and read equality against the A/A' floor (docs/gpu.md)")


def is_release(experiment: ComposeExperiment) -> bool:
    """A release sign-off: its arms run different images (vLLM versions), or its name says so."""
    images = {arm.image or "" for arm in experiment.arms.values()}
    return len(images) > 1 or "release" in experiment.name


def check_revision(experiment: ComposeExperiment, allow_unpinned: bool) -> str:
    """The model's line, or a refusal: a release sign-off must pin the model to a commit."""
    model = experiment.model
    revision = model.revision
    if revision is not None and COMMIT.fullmatch(revision):
        return f"model {model.id}: revision {revision} (pinned)"
    shown = "is not set" if revision is None else f"is {revision!r}, not a commit"
    if is_release(experiment) and not allow_unpinned:
        raise PreflightRefused(
            f"model.revision {shown}: a release sign-off must pin {model.id} to a 40-hex commit "
            "sha (model.revision), or pass --allow-unpinned")
    why = "allowed by --allow-unpinned" if allow_unpinned else "not a release sign-off"
    return f"model {model.id}: revision {revision or 'main'}, not pinned ({why})"


def preflight(experiment: ComposeExperiment, probes: HostProbes, env: Mapping[str, str],
              allow_unpinned: bool = False) -> list[str]:
    """Every check, in order; the lines to print on success, else ``PreflightRefused``."""
    gpus = check_runtime(probes)
    lines = [check_driver(gpus), *check_gpus(experiment, placements(experiment, env), gpus)]
    lines.append(check_revision(experiment, allow_unpinned))
    return [*lines, "gpu preflight: ok"]


# ---- shell: probes and files -------------------------------------------------------------------


def run_probe(argv: list[str], timeout: float = 30) -> Probe:
    """Run one probe command (``found=False`` when it is not on PATH)."""
    if shutil.which(argv[0]) is None:
        return Probe(found=False)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(returncode=-1, stderr=f"{argv[0]}: {exc}")
    return Probe(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr)


def probe_host() -> HostProbes:
    """``nvidia-smi`` first; Docker only when the GPUs answered."""
    smi = run_probe(GPU_QUERY)
    docker = run_probe(DOCKER_RUNTIMES) if smi.found and smi.returncode == 0 else Probe(found=False)
    return HostProbes(nvidia_smi=smi, docker=docker)


def load_config(path: Path) -> ComposeExperiment:
    """The GPU config as ``python -m abserve.deploy.compose_env`` reads it (the one reader of
    experiment files: ``extends:``, packaged names, the policy resolved), checked against the
    compose file; one line (no value of the file) if not."""
    try:
        return load_experiment(path)
    except ValueError as exc:  # ConfigError, YamlFileError, PackagedError
        raise PreflightRefused(str(exc).splitlines()[0]) from None


def placement_env(env_file: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The env file's variables with the shell's on top (compose's precedence); ``None``: ``.env``
    when it exists."""
    path = env_file if env_file is not None else Path(".env")
    if env_file is not None and not path.is_file():
        raise PreflightRefused(f"no env file {path}")
    values = read_env_file(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return {**values, **environ}


def run_preflight(config: Path, env_file: Path | None, environ: Mapping[str, str],
                  allow_unpinned: bool = False) -> list[str]:
    """``abserve check CONFIG --gpu``: load, probe, check; the lines, or ``PreflightRefused``."""
    experiment = load_config(config)
    env = placement_env(env_file, environ)
    return preflight(experiment, probe_host(), env, allow_unpinned)
