#!/usr/bin/env bash
# `make compose-check`: the GPU host's docker compose stack, executed on a machine without a
# GPU, end to end, then everything torn down.
#   scripts/compose-check.sh [STEP ...]     steps: signoff rotation postgres (default: all)
#     and the fault cases of scripts/compose-faults.sh: arm-killed worker-killed router-restart
#     (`make compose-faults`); `images` builds and smoke-tests the GPU host's own Dockerfiles
#     (abserve.Dockerfile, and vllm-cpu.Dockerfile for vLLM's) from a Debian base and a
#     local wheelhouse (about 20 minutes cold; `make compose-images`)
# 1. Engine: Debian's docker.io and Compose v2 installed if missing, dockerd started if none
#    answers (scripts/compose-engine.sh; data root outside the repository).
# 2. Image: the CPU stack's runtime image (scripts/compose-images.sh host: a few files,
#    imported; the containers run the host's /usr, Python and this project read-only).
# 3. Model: the tiny vision-language model abserve builds offline, laid into a Hugging Face
#    cache as the snapshot of the revision configs/cpu-compose.yaml pins.
# 4. signoff: scripts/signoff.sh configs/cpu-compose.yaml with COMPOSE_FILE naming
#    docker-compose.yml and docker-compose.cpu.yml (the one place the CPU stack differs);
#    asserts signoff.sh's exit code, the report's verdict and each arm's proof.
#    rotation: scripts/gpu-rotation.sh with 2 blocks (the arms swap cores 0 and 1); asserts
#    the combined report. postgres: the sign-off with its store in PostgreSQL (a server
#    container on the stack's network, docker/compose-check.postgres.yml).
# 5. Teardown, whatever happened: the stack, its networks, dangling images and build cache,
#    and the dockerd this script started (with the firewall rules and bridge it added).
# Writes the times of each step to .abserve/compose/times.txt (benchmarks/compose.md).
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=configs/cpu-compose.yaml
WORK="$PWD/.abserve/compose"
ENV_FILE="$WORK/cpu.env"
TIMES="$WORK/times.txt"
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(signoff rotation postgres)
PY=.venv/bin/python
export COMPOSE_FILE=docker-compose.yml:docker-compose.cpu.yml
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0   # the classic builder: no buildx here
export ABSERVE_ENV_FILE="$ENV_FILE"
# One build at a time: services sharing an image then reuse the first build from cache
# (in parallel each would install the same 3 GB again).
export COMPOSE_PARALLEL_LIMIT=1

log() { printf '[compose-check] %s\n' "$*"; }
fail() { log "FAILED: $*"; exit 1; }
started_at=$(date +%s)
step_start=$started_at
lap() {  # lap NAME: the seconds since the last lap, recorded
  local now; now=$(date +%s)
  printf '%-10s %5d s\n' "$1" "$((now - step_start))" | tee -a "$TIMES"
  step_start=$now
}

mkdir -p "$WORK"
: > "$TIMES"
engine_was_ours=0
[ -f "${ABSERVE_DOCKER_ROOT:-/var/lib/abserve-docker}/dockerd.pid" ] && engine_was_ours=1
engine_running_before=0
docker info >/dev/null 2>&1 && engine_running_before=1

teardown() {
  local rc=$?
  log "teardown"
  docker compose --env-file "$ENV_FILE" down --remove-orphans --volumes >/dev/null 2>&1 || true
  docker compose --env-file "$ENV_FILE" -f docker-compose.yml -f docker-compose.cpu.yml \
    -f docker/compose-check.postgres.yml down --remove-orphans --volumes >/dev/null 2>&1 || true
  docker image prune -f >/dev/null 2>&1 || true
  docker builder prune -f >/dev/null 2>&1 || true
  if [ "$engine_running_before" = 0 ] || [ "$engine_was_ours" = 1 ]; then
    [ "${ABSERVE_KEEP_ENGINE:-0}" = 1 ] || scripts/compose-engine.sh stop
  fi
  lap teardown
  log "total $(( $(date +%s) - started_at )) s; exit $rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- 1. engine, 2. images ------------------------------------------------------------------
scripts/compose-engine.sh start
lap engine
scripts/compose-images.sh host
lap images

# --- 3. the model in a Hugging Face cache, at the pinned revision ---------------------------
model_id="$(sed -n 's/^  id: *//p' "$CONFIG" | head -n 1)"
revision="$(sed -n 's/^  revision: *\([0-9a-f]*\).*/\1/p' "$CONFIG" | head -n 1)"
[ ${#revision} -eq 40 ] || fail "$CONFIG must pin a 40-hex revision"
[ -f .abserve/models/tiny-llava/config.json ] || "$PY" -m abserve build-model --out .abserve/models/tiny-llava
snapshot="$WORK/hf-cache/hub/models--${model_id//\//--}/snapshots/$revision"
rm -rf "$WORK/hf-cache"
mkdir -p "$snapshot"
cp .abserve/models/tiny-llava/* "$snapshot/"

api_key="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(24))')"
router_port="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat > "$ENV_FILE" <<ENV
# Written by scripts/compose-check.sh for the CPU stack (regenerated every run).
ABSERVE_API_KEY=$api_key
ABSERVE_RUNS_DIR=$WORK/runs
ABSERVE_HF_CACHE=$WORK/hf-cache
ABSERVE_FETCH_OFFLINE=1
ABSERVE_ROUTER_BIND=127.0.0.1
ABSERVE_ROUTER_PORT=$router_port
ABSERVE_GPU_A=0
ABSERVE_GPU_B=1
ABSERVE_GPU_A2=0
ABSERVE_HOST_PYTHON=$("$PY" -c 'import sys; print(sys.base_prefix)')
ABSERVE_HOST_PROJECT=$PWD
ABSERVE_SHM_SIZE=1gb
ABSERVE_ARM_HEALTH_INTERVAL=3s
ABSERVE_ROUTER_HEALTH_INTERVAL=2s
ABSERVE_LOCUST_WORKERS=1
ABSERVE_PG_PASSWORD=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
ENV
# The experiment section, as .env.example carries the 3B config's (signoff.sh derives it
# again per run; `docker compose build` needs the file to interpolate).
"$PY" -m abserve.deploy.compose_env "$CONFIG" >> "$ENV_FILE"
mkdir -p "$WORK/runs"
lap model

check_report() {  # check_report RUN_ID EXPECTED_EXIT ACTUAL_EXIT [--blocks N]
  local run_id="$1" want="$2" got="$3"; shift 3
  [ "$got" = "$want" ] || fail "$run_id: exit code $got, expected $want (see $WORK/runs/$run_id/compose.log)"
  "$PY" -m abserve.deploy.check_report "reports/$run_id" --exit-code "$got" \
    --expect a=linear --expect b=bisect "$@" || fail "$run_id: report check"
}

# shellcheck source=scripts/compose-faults.sh
. scripts/compose-faults.sh
for step in "${STEPS[@]}"; do
  case "$step" in
    signoff)
      run_id="check-signoff-$(date -u +%Y%m%d-%H%M%S)"
      code=0
      ABSERVE_RUN_ID_OVERRIDE="$run_id" scripts/signoff.sh "$CONFIG" || code=$?
      check_report "$run_id" 2 "$code"
      lap signoff ;;
    rotation)
      code=0
      out="$(scripts/gpu-rotation.sh "$CONFIG" 2 0 1 2>&1 | tee "$WORK/rotation.log")" || code=$?
      code="$(sed -n 's/^gpu-rotation: combined report in reports\/\(.*\) (exit \([0-9]*\))$/\2/p' "$WORK/rotation.log")"
      rotation="$(sed -n 's/^gpu-rotation: combined report in reports\/\([^ ]*\) .*/\1/p' "$WORK/rotation.log")"
      [ -n "$rotation" ] || fail "the rotation wrote no combined report (see $WORK/rotation.log)"
      check_report "$rotation" 2 "$code" --blocks 2
      lap rotation ;;
    postgres)
      run_id="check-postgres-$(date -u +%Y%m%d-%H%M%S)"
      code=0
      pg_password="$(sed -n 's/^ABSERVE_PG_PASSWORD=//p' "$ENV_FILE")"
      COMPOSE_FILE="$COMPOSE_FILE:docker/compose-check.postgres.yml" \
        ABSERVE_DATABASE_URL="postgresql+psycopg://abserve:$pg_password@postgres:5432/abserve" \
        ABSERVE_RUN_ID_OVERRIDE="$run_id" scripts/signoff.sh "$CONFIG" || code=$?
      check_report "$run_id" 2 "$code"
      [ ! -e "$WORK/runs/$run_id/abserve.db" ] || fail "$run_id: a SQLite store was written beside PostgreSQL"
      lap postgres ;;
    images)
      scripts/compose-images.sh dockerfiles
      lap images ;;
    arm-killed|worker-killed|router-restart)
      fault_step "$step"
      lap "$step" ;;
    *) fail "unknown step $step (signoff, rotation, postgres, images, arm-killed, worker-killed, router-restart)" ;;
  esac
done
log "all steps passed: ${STEPS[*]}"
