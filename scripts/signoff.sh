#!/usr/bin/env bash
# The whole sign-off on a GPU host, in one command:
#   scripts/signoff.sh [CONFIG]        (default configs/gpu-qwen2.5-vl-3b.yaml)
# Builds the service image, derives compose's environment from CONFIG
# (python -m abserve.deploy.compose_env, run in the service image), builds each arm's vLLM
# image from the base image the config names for it, runs docker-compose.yml
# (arms -> router -> Locust -> report) under a fresh run id, saves every container's log
# to runs/<id>/compose.log, tears the stack down, and exits with the report's code:
#   0 pass, 1 fail, 2 inconclusive or marginal, 3 invalid (also: the report never ran),
#   4 or more a tool error: refused before anything ran (no config or .env, no key, a config
#   compose cannot run, the GPU preflight refused), or the report itself judged nothing.
#   The preflight (`abserve check CONFIG --gpu`) runs before any image is pulled or
#   built: NVIDIA runtime, GPU ids and memory per arm, compute capability, a pinned release
#   model; docs/gpu.md "Preflight"). ABSERVE_SKIP_PREFLIGHT=1 skips it, ABSERVE_ALLOW_UNPINNED=1
#   passes --allow-unpinned; the CPU override (COMPOSE_FILE naming docker-compose.cpu.yml) has
#   no GPU to check and skips it too.
# Needs Docker with the NVIDIA container toolkit and Compose v2.20+; .env from .env.example
# (ABSERVE_ENV_FILE names another file; COMPOSE_FILE=docker-compose.yml:docker-compose.cpu.yml
# runs the CPU stack, as scripts/compose-check.sh does).
# Extra arguments after CONFIG go to `docker compose up` (e.g. --scale locust-worker=4,
# which must match ABSERVE_LOCUST_WORKERS).
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG="${1:-configs/gpu-qwen2.5-vl-3b.yaml}"
shift || true
INVALID=3   # the run could not be judged (abserve/exit_codes.py)
REFUSED=4   # a tool error: the sign-off was refused before anything ran
ENV_FILE="${ABSERVE_ENV_FILE:-.env}"

die() { echo "signoff: $*" >&2; exit "$REFUSED"; }

[ -f "$CONFIG" ] || die "no such config: $CONFIG"
[ -f "$ENV_FILE" ] || die "no $ENV_FILE: cp .env.example .env and set ABSERVE_API_KEY and the GPU placement"
grep -Eq '^ABSERVE_API_KEY=.{16,}' "$ENV_FILE" || die "set ABSERVE_API_KEY (16+ characters) in $ENV_FILE"

# The GPU preflight, on the host (no image needed): abserve on PATH, else the checkout's .venv.
preflight() {
  if [ "${ABSERVE_SKIP_PREFLIGHT:-0}" = 1 ]; then
    echo "signoff: GPU preflight skipped (ABSERVE_SKIP_PREFLIGHT=1)"; return 0
  fi
  case "${COMPOSE_FILE:-}" in
    *docker-compose.cpu.yml*) echo "signoff: GPU preflight skipped (CPU override)"; return 0 ;;
  esac
  local abserve flags=(--gpu --env-file "$ENV_FILE")
  if command -v abserve >/dev/null 2>&1; then abserve=abserve
  elif [ -x .venv/bin/abserve ]; then abserve=.venv/bin/abserve
  else
    echo "signoff: abserve is not installed for the GPU preflight: pipx install '.[service]' (or set ABSERVE_SKIP_PREFLIGHT=1)" >&2
    exit "$REFUSED"
  fi
  [ "${ABSERVE_ALLOW_UNPINNED:-0}" = 1 ] && flags+=(--allow-unpinned)
  local rc=0
  "$abserve" check "$CONFIG" "${flags[@]}" < /dev/null || rc=$?
  [ "$rc" = 0 ] || exit "$rc"
}
preflight
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

# Arms beyond a, b and a2 (any number of candidates): their services come from generated
# compose files, one per compose file of the stack (python -m abserve.deploy.compose_env
# --arms-compose: that file's vllm-b with the arm's names), appended to COMPOSE_FILE.
extra_arms="$(for arm in $(sed -n 's/^ABSERVE_ARMS=//p' "$run_dir/compose.env" | tail -n 1); do
  case "$arm" in a|b|a2) ;; *) echo "$arm" ;; esac; done)"
if [ -n "$extra_arms" ]; then
  compose_files="${COMPOSE_FILE:-docker-compose.yml}"
  generated=""
  i=0
  IFS=: read -r -a sources <<< "$compose_files"
  for source in "${sources[@]}"; do
    out="$run_dir/arms.$i.yml"
    docker compose --env-file "$ENV_FILE" run --rm --no-deps -T --entrypoint python prepare \
      -m abserve.deploy.compose_env --arms-compose "$CONFIG" < "$source" > "$out" \
      || die "$CONFIG: the compose file of the extra arms could not be made from $source"
    if [ -s "$out" ]; then generated="$generated:$out"; fi
    i=$((i + 1))
  done
  export COMPOSE_FILE="$compose_files$generated"
  echo "signoff: extra arms ${extra_arms//$'\n'/ } from ${generated#:}"
fi

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
# A live view while the stack runs: `abserve watch` in the service image reads the run's store
# (SQLite under the runs dir, or ABSERVE_DATABASE_URL), waits for the router to create the run,
# prints one line per refresh (requests, errors and mismatches per arm, the critical gates'
# intervals, the requests left of the load plan) and ends by itself once the run is finished;
# it is stopped by its PID (and its container removed by name) when the report ends.
# ABSERVE_WATCH=0 turns it off; ABSERVE_WATCH_EVERY sets the refresh (30 s).
setting() { sed -n "s/^$1=//p" "$ENV_FILE" "$run_dir/compose.env" | tail -n 1; }
watch_pid=""
watch_name="abserve-watch-$ABSERVE_RUN_ID"
planned_requests() {  # the load plan's requests (profile:requests[:set] words): what is left
  local total=0 word count
  for word in $(setting ABSERVE_LOAD_PLAN); do
    count="${word#*:}"; count="${count%%:*}"
    case "$count" in ''|*[!0-9]*) ;; *) total=$((total + count)) ;; esac
  done
  echo "$total"
}
start_watch() {  # $1: the service whose mounts and network reach the store; then watch's --db
  local service="$1"; shift
  "${dc[@]}" run --rm --no-deps -T --name "$watch_name" --user "$ABSERVE_UID:$ABSERVE_GID" \
    --entrypoint abserve "$service" \
    watch "$ABSERVE_RUN_ID" "$@" --policy "/app/$watch_policy" --budget "$(planned_requests)req" \
    --every "${ABSERVE_WATCH_EVERY:-30}" --wait 86400 < /dev/null &
  watch_pid=$!
}
stop_watch() {
  [ -n "$watch_pid" ] || return 0
  kill "$watch_pid" 2>/dev/null || true
  wait "$watch_pid" 2>/dev/null || true
  docker rm -f "$watch_name" >/dev/null 2>&1 || true
  watch_pid=""
}
watch_db="${ABSERVE_DATABASE_URL:-$(setting ABSERVE_DATABASE_URL)}"
watch_policy="$(setting ABSERVE_POLICY)"
watch_policy="${watch_policy:-configs/policy/gpu.yaml}"
if [ "${ABSERVE_WATCH:-1}" != 0 ]; then
  trap 'stop_watch; cleanup' EXIT
  # The default SQLite store: from the prepare service, which needs no network. Else from the
  # report service (on the store's network, its ABSERVE_DATABASE_URL the store: no password on
  # this host's command lines) once `up` has made that network (below).
  [ -n "$watch_db" ] || start_watch prepare --db "sqlite:////runs/$ABSERVE_RUN_ID/abserve.db"
fi

up_rc=0
"${dc[@]}" up --detach "$@" || up_rc=$?
report_id="$("${dc[@]}" ps --all --quiet report 2>/dev/null || true)"
if [ -z "$report_id" ]; then
  echo "signoff: the report never ran (docker compose up exited $up_rc); see $run_dir/compose.log" >&2
  exit "$INVALID"
fi
if [ "${ABSERVE_WATCH:-1}" != 0 ] && [ -z "$watch_pid" ]; then start_watch report; fi
code="$(docker wait "$report_id")"
stop_watch
# A report container that was created but never started (a dependency failed: the load, the
# router) "exits" 0 for `docker wait`: that is no verdict.
if [ "$(docker inspect -f '{{.State.StartedAt}}' "$report_id" 2>/dev/null | cut -c1-4)" = "0001" ]; then
  echo "signoff: the report never ran (a service it depends on failed); see $run_dir/compose.log" >&2
  exit "$INVALID"
fi
"${dc[@]}" logs --no-color report || true
case "$code" in
  0) verdict=pass ;; 1) verdict=fail ;; 2) verdict="inconclusive or marginal" ;; 3) verdict=invalid ;;
  *) echo "signoff: the report judged nothing (a tool error, exit $code); see $run_dir/compose.log" >&2
     exit "$code" ;;
esac
echo "signoff: $verdict (exit $code); report in reports/$ABSERVE_RUN_ID, run data in $run_dir"
exit "$code"
