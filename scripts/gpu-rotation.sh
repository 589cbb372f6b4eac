#!/usr/bin/env bash
# Counterbalanced sign-off on a GPU host: two GPUs are not identical, so the arms swap GPUs
# between blocks in a balanced order (ABBA...). A running vLLM server cannot move to another
# GPU, so each block is a whole sign-off (scripts/signoff.sh) with the GPU assignment swapped;
# `abserve combine` then merges the block runs into one run tagged by block and placement, and
# `abserve report` judges it within placements (the same judgment as the CPU blocks).
#   scripts/gpu-rotation.sh CONFIG [BLOCKS] [GPU_X] [GPU_Y]     (defaults: 4 blocks, GPUs 0 1)
# Exits with the combined report's code (0 pass, 1 fail, 2 inconclusive/marginal, 3 invalid;
# 4 refused: an odd BLOCKS, a config compose cannot run).
# GPU_ROTATION_DRY_RUN=1 prints the plan (block, run id, GPU of a and b) and runs nothing.
# ABSERVE_ENV_FILE names the env file (default .env), as for scripts/signoff.sh.
# The rotation itself is `abserve rotate` (abserve.deploy.rotation: the config read with the
# one reader of abserve, extends: and packaged names included; the block order and exit codes
# are abserve's own); this script runs it from the checkout's root with the abserve on PATH,
# else the checkout's .venv, as signoff.sh's preflight does.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v abserve >/dev/null 2>&1; then abserve=abserve
elif [ -x .venv/bin/abserve ]; then abserve=.venv/bin/abserve
else
  echo "gpu-rotation: abserve is not installed: pipx install '.[service]'" >&2
  exit 4
fi
exec "$abserve" rotate "$@"
