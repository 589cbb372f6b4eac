#!/usr/bin/env bash
# The whole sign-off on a GPU host, in one command:
#   scripts/signoff.sh [CONFIG] [docker compose up options]   (default configs/gpu-qwen2.5-vl-3b.yaml)
# Derives compose's environment from CONFIG (python -m abserve.deploy.compose_env, run in the
# service image: the one reader of experiment files, `extends:` included), builds each arm's
# vLLM image from the base image the config names for it, and runs docker-compose.yml under a
# fresh run id: the arms start, and the orchestrator service runs `abserve run --target
# compose` on CONFIG (the same orchestrator as on a CPU machine: rounds, the sequential stop
# within the config's budget, traffic files, proofs, the report), with
# `docker compose up --exit-code-from orchestrator`, which stops the stack when the sign-off is
# decided. Saves every container's log to runs/<id>/compose.log, tears the stack down, and
# exits with the orchestrator's code (abserve/base/exit_codes.py):
#   0 pass, 1 fail, 2 inconclusive or marginal, 3 invalid, 4 refused (before anything ran: no
#   config or .env, a config compose cannot run, the GPU preflight refused, an image that did
#   not build or whose base image did not pull; or the run's own checks), 5 internal error,
#   6 the load stopped at its error-rate limit, 7 a load worker was lost (6 and 7 with an
#   INVALID report), 130 interrupted. It says "report in" only where a report was written.
#   The preflight (`abserve check CONFIG --gpu`) runs before any image is pulled or
#   built: NVIDIA runtime, GPU ids and memory per arm, compute capability, a pinned release
#   model; docs/gpu.md "Preflight"). ABSERVE_SKIP_PREFLIGHT=1 skips it, ABSERVE_ALLOW_UNPINNED=1
#   passes --allow-unpinned; the CPU override (COMPOSE_FILE naming docker-compose.cpu.yml) has
#   no GPU to check and skips it too.
# CONFIG must lie under configs/ or traffic/ of this checkout (the folders the stack mounts).
# The store: ABSERVE_DATABASE_URL (.env or the shell), else SQLite in runs/<id>/. One ledger for
# the host's sign-offs (what an arm `from: accepted` reads): ABSERVE_DATABASE_URL naming the
# compose profile `ledger`'s server (postgresql+psycopg://abserve:PASSWORD@ledger-db:5432/abserve,
# with ABSERVE_LEDGER_PASSWORD) starts that profile first; docs/gpu.md "One ledger on the host".
# Needs Docker with the NVIDIA container toolkit and Compose v2.20+; .env from .env.example
# (ABSERVE_ENV_FILE names another file; COMPOSE_FILE=docker-compose.yml:docker-compose.cpu.yml
# runs the CPU stack, as scripts/compose-check.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG="${1:-configs/gpu-qwen2.5-vl-3b.yaml}"
shift || true
INVALID=3   # the run could not be judged (abserve/base/exit_codes.py)
REFUSED=4   # the sign-off was refused before anything ran
ENV_FILE="${ABSERVE_ENV_FILE:-.env}"

die() { echo "signoff: $*" >&2; exit "$REFUSED"; }

# `docker compose ... build SERVICE...`, its output shown as it comes. A failed build (a step of
# it, or the pull of the base image it starts FROM) is refused (4), not left with docker's own
# status: one line naming the image (the service docker's output names, else each one built)
# and docker's message, its last line that says something (the whole output is above).
build_images() {
  local compose=() services=() failed=() err said svc image base images="" rc=0
  while [ "$1" != build ]; do compose+=("$1"); shift; done
  shift
  services=("$@")
  err="$(mktemp)"
  { "${compose[@]}" build "${services[@]}" 2>&1 1>&3 3>&- | tee "$err" >&2 3>&-; } 3>&1 || rc=$?
  if [ "$rc" = 0 ]; then rm -f "$err"; return 0; fi
  for svc in "${services[@]}"; do
    if grep -qE "(\[|target )$svc[] :]" "$err"; then failed+=("$svc"); fi
  done
  [ "${#failed[@]}" -gt 0 ] || failed=("${services[@]}")
  for svc in "${failed[@]}"; do
    image="$("${compose[@]}" config --images "$svc" 2>/dev/null < /dev/null | head -n 1 || true)"
    base="$("${compose[@]}" config "$svc" 2>/dev/null < /dev/null | sed -n 's/^ *VLLM_IMAGE: //p' | head -n 1 || true)"
    images="$images, ${image:-$svc}${base:+ (FROM $base)}"
  done
  said="$(grep -vE '^[[:space:]]*-*[[:space:]]*$' "$err" | tail -n 1 | sed 's/^[[:space:]]*//' || true)"
  rm -f "$err"
  die "building ${images#, } failed: ${said:-docker said nothing} (docker compose build exited $rc)"
}

[ -f "$CONFIG" ] || die "no such config: $CONFIG"
case "$CONFIG" in
  configs/*|traffic/*|./configs/*|./traffic/*) ;;
  *) die "$CONFIG: the stack mounts only configs/ and traffic/ of this checkout: move the config there" ;;
esac
[ -f "$ENV_FILE" ] || die "no $ENV_FILE: cp .env.example .env and set the GPU placement"

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

# The host's ledger (docker-compose.yml's profile `ledger`) when the store names its server.
db_url="${ABSERVE_DATABASE_URL:-$(sed -n 's/^ABSERVE_DATABASE_URL=//p' "$ENV_FILE" | tail -n 1)}"
profile=()
case "$db_url" in *@ledger-db:*|*@ledger-db/*) profile=(--profile ledger) ;; esac

name="$(basename "$CONFIG" .yaml)"
export ABSERVE_RUN_ID="${ABSERVE_RUN_ID_OVERRIDE:-signoff-$name-$(date -u +%Y%m%d-%H%M%S)-$RANDOM}"
export ABSERVE_UID ABSERVE_GID
ABSERVE_UID="$(id -u)"
ABSERVE_GID="$(id -g)"
runs_dir="$(sed -n 's/^ABSERVE_RUNS_DIR=//p' "$ENV_FILE" | tail -n 1)"
run_dir="${runs_dir:-./runs}/$ABSERVE_RUN_ID"
mkdir -p "$run_dir"
# The Hugging Face cache exists before compose mounts it, created by the host user: model-fetch
# runs as that user (Docker would create a missing folder as root).
hf_cache="$(sed -n 's/^ABSERVE_HF_CACHE=//p' "$ENV_FILE" | tail -n 1)"
hf_cache="${ABSERVE_HF_CACHE:-${hf_cache:-~/.cache/huggingface}}"
case "$hf_cache" in "~"*) hf_cache="$(echo ~)${hf_cache#\~}" ;; esac
mkdir -p "$hf_cache"
echo "signoff: run $ABSERVE_RUN_ID, config $CONFIG"

# The service image first (it derives the environment), then each arm's vLLM image from the
# base image the config names for it (ABSERVE_VLLM_IMAGE_<ARM>, else .env's shared one).
build_images docker compose --env-file "$ENV_FILE" build prepare
# (</dev/null: `compose run` reads its stdin, which is the block plan in gpu-rotation.sh's loop.)
# Derived in the orchestrator's container: it reaches the store, where an arm `from: accepted`
# is resolved to the accepted release's image before anything is built (refused, exit 4, while
# nothing is accepted).
if [ ${#profile[@]} -gt 0 ]; then
  docker compose "${profile[@]}" --env-file "$ENV_FILE" up -d --wait ledger-db < /dev/null \
    || die "the ledger's server (service ledger-db) did not start: docker compose --profile ledger logs ledger-db"
fi
docker compose ${profile[@]+"${profile[@]}"} --env-file "$ENV_FILE" run --rm --no-deps -T \
  --entrypoint python orchestrator -m abserve.deploy.compose_env "$CONFIG" > "$run_dir/compose.env" < /dev/null \
  || die "$CONFIG cannot run under docker compose (see the message above)"
# An arm `from: accepted` is the image the accepted sign-off ran, pinned by this host's image id
# (REF@sha256:ID). A build looks a digest up as a registry's manifest digest, which a local
# image id is not (Docker's classic image store), so that id is tagged abserve/accepted:<its
# first 12 hex digits> and the arm is built from the tag: the very image, whatever REF names today. A digest that is no local image id (a
# registry digest of an image you pinned) is left to the build.
while IFS='=' read -r key ref; do
  id="${ref##*@}"
  docker image inspect "$id" >/dev/null 2>&1 < /dev/null || continue
  tag="abserve/accepted:${id:7:12}"
  docker tag "$id" "$tag" < /dev/null || die "cannot tag image $id as $tag"
  sed -i "s|^$key=.*|$key=$tag|" "$run_dir/compose.env"
  echo "signoff: arm ${key#ABSERVE_VLLM_IMAGE_} is $ref: this host's image $id, as $tag"
done < <(grep -E '^ABSERVE_VLLM_IMAGE_[A-Z0-9]+=[^@]+@sha256:[0-9a-f]{64}$' "$run_dir/compose.env" || true)

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

# A --profile flag replaces COMPOSE_PROFILES (compose.env's noise-floor for arm a2), so with
# the ledger's profile the run's own profiles are named as flags too.
if [ ${#profile[@]} -gt 0 ]; then
  for name in $(sed -n 's/^COMPOSE_PROFILES=//p' "$run_dir/compose.env" | tail -n 1 | tr ',' ' '); do
    profile+=(--profile "$name")
  done
fi
dc=(docker compose ${profile[@]+"${profile[@]}"} --env-file "$ENV_FILE" --env-file "$run_dir/compose.env")
arm_services=(model-fetch)
for arm in $(sed -n 's/^ABSERVE_ARMS=//p' "$run_dir/compose.env" | tail -n 1); do
  arm_services+=("vllm-$arm")
done
build_images "${dc[@]}" build "${arm_services[@]}"
# What each arm runs, for the run's provenance: the image compose runs for it (resolved from the
# stack's compose files) and that image's id.
ABSERVE_ARM_IMAGES=""
for pair in $("${dc[@]}" config 2>/dev/null | "${dc[@]}" run --rm --no-deps -T --entrypoint python prepare \
                -m abserve.deploy.compose_env --arm-images "$CONFIG" 2>/dev/null); do
  ref="${pair#*=}"
  id="$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)"
  ABSERVE_ARM_IMAGES="$ABSERVE_ARM_IMAGES ${pair%%=*}=$ref${id:+@$id}"
done
export ABSERVE_ARM_IMAGES="${ABSERVE_ARM_IMAGES# }"
cleanup() {
  "${dc[@]}" logs --no-color --timestamps > "$run_dir/compose.log" 2>&1 || true
  "${dc[@]}" down --remove-orphans >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The orchestrator's output only (the arms' logs go to runs/<id>/compose.log); compose stops
# every service once the orchestrator exits and returns its code. A dependency that failed
# (an arm that never became healthy) means the orchestrator never ran: no verdict.
code=0
"${dc[@]}" up --exit-code-from orchestrator --attach orchestrator "$@" || code=$?
started="$("${dc[@]}" ps --all --format '{{.Service}} {{.State}}' 2>/dev/null | sed -n 's/^orchestrator //p')"
if [ -z "$started" ] || [ "$("${dc[@]}" ps --all -q orchestrator | xargs -r docker inspect -f '{{.State.StartedAt}}' | cut -c1-4)" = "0001" ]; then
  echo "signoff: the orchestrator never ran (a service it depends on failed; docker compose up exited $code); see $run_dir/compose.log" >&2
  exit "$INVALID"
fi
# Where to look: the report, where the orchestrator wrote one (a run that failed before it judged
# writes none), else the stack's log.
look_at() {
  if [ -f "$run_dir/report.html" ]; then echo "report in $run_dir/report.html, run data in $run_dir"
  else echo "no report was written; see $run_dir/compose.log"; fi
}
case "$code" in
  0) verdict=pass ;; 1) verdict=fail ;; 2) verdict="inconclusive or marginal" ;; 3) verdict=invalid ;;
  4) echo "signoff: the run was refused (exit 4); see the orchestrator's line above" >&2; exit 4 ;;
  6) echo "signoff: the load stopped at its error-rate limit (exit 6); $(look_at)" >&2; exit 6 ;;
  7) echo "signoff: a load worker was lost (exit 7); $(look_at)" >&2; exit 7 ;;
  *) echo "signoff: no verdict (exit $code); see $run_dir/compose.log" >&2; exit "$code" ;;
esac
echo "signoff: $verdict (exit $code); $(look_at)"
exit "$code"
