#!/usr/bin/env bash
# Counterbalanced sign-off on a GPU host: two GPUs are not identical, so the arms swap GPUs
# between blocks in a balanced order (ABBA...). A running vLLM server cannot move to another
# GPU, so each block is a whole sign-off (scripts/signoff.sh) with the GPU assignment swapped;
# `abserve combine` then merges the block runs into one run tagged by block and placement, and
# `abserve report` judges it within placements (the same judgment as the CPU blocks).
#   scripts/gpu-rotation.sh CONFIG [BLOCKS] [GPU_X] [GPU_Y]     (defaults: 4 blocks, GPUs 0 1)
# Exits with the combined report's code (0 pass, 1 fail, 2 inconclusive/marginal, 3 invalid).
# GPU_ROTATION_DRY_RUN=1 prints the plan (block, run id, GPU of a and b) and runs nothing.
# ABSERVE_ENV_FILE names the env file (default .env), as for scripts/signoff.sh. `combine` and
# `report` run in the orchestrator service's container as the host user (`id -u`:`id -g`), who
# owns runs/ (the image's own user could not create the combined store there). Each block is a
# whole sign-off by the orchestrator (`abserve run --target compose`): a running vLLM server
# cannot move to another GPU, so the compose target rotates placement by blocks of runs, not
# within one run as the local target's blocks.cpu_sets does.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG="${1:?usage: gpu-rotation.sh CONFIG [BLOCKS] [GPU_X] [GPU_Y]}"
BLOCKS="${2:-4}"
GPU_X="${3:-0}"
GPU_Y="${4:-1}"
[ $((BLOCKS % 2)) -eq 0 ] || { echo "gpu-rotation: BLOCKS must be even (balanced)" >&2; exit 3; }

rotation="rotation-$(basename "$CONFIG" .yaml)-$(date -u +%Y%m%d-%H%M%S)-$RANDOM"
env_file="${ABSERVE_ENV_FILE:-.env}"
runs_dir="$({ sed -n 's/^ABSERVE_RUNS_DIR=//p' "$env_file" 2>/dev/null || true; } | tail -n 1)"
runs_dir="${runs_dir:-./runs}"

# ABBA ABBA ...: block i uses the swapped assignment when i mod 4 is 1 or 2.
plan() {
  for ((i = 0; i < BLOCKS; i++)); do
    if [ $((i % 4)) -eq 1 ] || [ $((i % 4)) -eq 2 ]; then echo "$i $GPU_Y $GPU_X"; else echo "$i $GPU_X $GPU_Y"; fi
  done
}

if [ "${GPU_ROTATION_DRY_RUN:-0}" = 1 ]; then
  plan | while read -r i ga gb; do echo "block $i run $rotation-b$i a:gpu$ga b:gpu$gb"; done
  exit 0
fi

mkdir -p "$runs_dir/$rotation"
manifest="$runs_dir/$rotation/blocks.yaml"
: > "$manifest"
while read -r i ga gb; do
  run_id="$rotation-b$i"
  echo "gpu-rotation: block $i of $BLOCKS: a on GPU $ga, b on GPU $gb (run $run_id)"
  # The shell's environment wins over .env in compose's interpolation.
  # (</dev/null: nothing in a block may read this loop's plan.)
  ABSERVE_RUN_ID_OVERRIDE="$run_id" ABSERVE_GPU_A="$ga" ABSERVE_GPU_B="$gb" \
    scripts/signoff.sh "$CONFIG" < /dev/null || true   # each block's own verdict is not the sign-off
  cat >> "$manifest" <<YAML
- {database_url: "sqlite:////runs/$run_id/abserve.db", run_id: "$run_id", placement: "a:gpu$ga,b:gpu$gb"}
YAML
done < <(plan)

# The policy the blocks were judged with: the config's policy: line (a path in the checkout,
# seen at /app in the container, or a packaged name), else the GPU policy.
policy="$(sed -n 's/^policy: *//p' "$CONFIG" | head -n 1)"
case "$policy" in "") policy=gpu ;; */*) policy="/app/$policy" ;; esac
# The orchestrator service's container (its image and runs/, configs/ and traffic/ mounts), run
# once each, without the arms.
service=(docker compose --env-file "$env_file" run --rm --no-deps -T --user "$(id -u):$(id -g)"
         --entrypoint abserve orchestrator)
"${service[@]}" combine "/runs/$rotation/blocks.yaml" --db "sqlite:////runs/$rotation/abserve.db" --into "$rotation"
code=0
"${service[@]}" report "$rotation" --db "sqlite:////runs/$rotation/abserve.db" --out "/runs/$rotation" \
  --policy "$policy" || code=$?
docker compose --env-file "$env_file" down --remove-orphans >/dev/null 2>&1 || true
echo "gpu-rotation: combined report in $runs_dir/$rotation (exit $code)"
exit "$code"
