#!/usr/bin/env bash
# The whole sign-off on a GPU host, in one command:
#   scripts/signoff.sh [CONFIG]        (default configs/gpu-qwen2.5-vl-3b.yaml)
# Builds the service image, derives compose's environment from CONFIG
# (python -m abserve.deploy.compose_env, run in the service image), builds each arm's vLLM
# image from the base image the config names for it, runs docker-compose.yml
# (arms -> router -> Locust -> report) under a fresh run id, saves every container's log
# to runs/<id>/compose.log, tears the stack down, and exits with the report's code:
#   0 pass, 1 fail, 2 inconclusive or marginal, 3 invalid (also: the report never ran).
# Needs Docker with the NVIDIA container toolkit and Compose v2.20+; .env from .env.example
# (ABSERVE_ENV_FILE names another file; COMPOSE_FILE=docker-compose.yml:docker-compose.cpu.yml
# runs the CPU stack, as scripts/compose-check.sh does).
# Extra arguments after CONFIG go to `docker compose up` (e.g. --scale locust-worker=4,
# which must match ABSERVE_LOCUST_WORKERS).
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG="${1:-configs/gpu-qwen2.5-vl-3b.yaml}"
shift || true
INVALID=3
ENV_FILE="${ABSERVE_ENV_FILE:-.env}"

die() { echo "signoff: $*" >&2; exit "$INVALID"; }

[ -f "$CONFIG" ] || die "no such config: $CONFIG"
[ -f "$ENV_FILE" ] || die "no $ENV_FILE: cp .env.example .env and set ABSERVE_API_KEY and the GPU placement"
grep -Eq '^ABSERVE_API_KEY=.{16,}' "$ENV_FILE" || die "set ABSERVE_API_KEY (16+ characters) in $ENV_FILE"
docker compose version >/dev/null 2>&1 || die "docker compose (v2) is required"

name="$(basename "$CONFIG" .yaml)"
export ABSERVE_RUN_ID="${ABSERVE_RUN_ID_OVERRIDE:-signoff-$name-$(date -u +%Y%m%d-%H%M%S)-$RANDOM}"
export ABSERVE_UID ABSERVE_GID
ABSERVE_UID="$(id -u)"
ABSERVE_GID="$(id -g)"
runs_dir="$(sed -n 's/^ABSERVE_RUNS_DIR=//p' "$ENV_FILE" | tail -n 1)"
run_dir="${runs_dir:-./runs}/$ABSERVE_RUN_ID"
mkdir -p "$run_dir" reports
# The Hugging Face cache exists before compose mounts it, created by the host user: model-fetch
# runs as that user (Docker would create a missing folder as root).
hf_cache="$(sed -n 's/^ABSERVE_HF_CACHE=//p' "$ENV_FILE" | tail -n 1)"
hf_cache="${ABSERVE_HF_CACHE:-${hf_cache:-~/.cache/huggingface}}"
case "$hf_cache" in "~"*) hf_cache="$(echo ~)${hf_cache#\~}" ;; esac
mkdir -p "$hf_cache"
echo "signoff: run $ABSERVE_RUN_ID, config $CONFIG"

# The service image first (it derives the environment), then each arm's vLLM image from the
# base image the config names for it (ABSERVE_VLLM_IMAGE_<ARM>, else .env's shared one).
docker compose --env-file "$ENV_FILE" build prepare
# (</dev/null: `compose run` reads its stdin, which is the block plan in gpu-rotation.sh's loop.)
docker compose --env-file "$ENV_FILE" run --rm --no-deps -T --entrypoint python prepare \
  -m abserve.deploy.compose_env "$CONFIG" > "$run_dir/compose.env" < /dev/null \
  || die "$CONFIG does not fit docker-compose.yml (see the message above)"

dc=(docker compose --env-file "$ENV_FILE" --env-file "$run_dir/compose.env")
arm_services=(model-fetch)
for arm in $(sed -n 's/^ABSERVE_ARMS=//p' "$run_dir/compose.env" | tail -n 1); do
  arm_services+=("vllm-$arm")
done
"${dc[@]}" build "${arm_services[@]}"
cleanup() {
  "${dc[@]}" logs --no-color --timestamps > "$run_dir/compose.log" 2>&1 || true
  "${dc[@]}" down --remove-orphans >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Detached `up` still starts services in dependency order and waits for each condition
# (healthy arms, completed load), so it returns once the report has started or a
# dependency failed. One-shot services (prepare, model-fetch) exit by design, which is why
# --abort-on-container-exit / --exit-code-from cannot be used here.
up_rc=0
"${dc[@]}" up --detach "$@" || up_rc=$?
report_id="$("${dc[@]}" ps --all --quiet report 2>/dev/null || true)"
if [ -z "$report_id" ]; then
  echo "signoff: the report never ran (docker compose up exited $up_rc); see $run_dir/compose.log" >&2
  exit "$INVALID"
fi
code="$(docker wait "$report_id")"
# A report container that was created but never started (a dependency failed: the load, the
# router) "exits" 0 for `docker wait`: that is no verdict.
if [ "$(docker inspect -f '{{.State.StartedAt}}' "$report_id" 2>/dev/null | cut -c1-4)" = "0001" ]; then
  echo "signoff: the report never ran (a service it depends on failed); see $run_dir/compose.log" >&2
  exit "$INVALID"
fi
"${dc[@]}" logs --no-color report || true
case "$code" in
  0) verdict=pass ;; 1) verdict=fail ;; 2) verdict="inconclusive or marginal" ;; 3) verdict=invalid ;;
  *) echo "signoff: the report crashed (exit $code)" >&2; exit "$INVALID" ;;
esac
echo "signoff: $verdict (exit $code); report in reports/$ABSERVE_RUN_ID, run data in $run_dir"
exit "$code"
