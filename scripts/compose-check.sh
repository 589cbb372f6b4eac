#!/usr/bin/env bash
# `make compose-check`: the GPU host's docker compose stack, executed on a machine without a
# GPU, end to end, then everything torn down.
#   scripts/compose-check.sh [STEP ...]     steps: signoff rotation postgres arms3 concurrency
#                                           decide text-only journey (default: all); what
#                                           `make test` runs: journey (the GPU pages' shell
#                                           blocks run as written on a stand-in GPU host,
#                                           tests/support/gpu_journey.py; the rotation as its
#                                           plan there, ABSERVE_JOURNEY_QUICK=1); also
#                                           decide-postgres (the decisive family stored in
#                                           PostgreSQL), ledger-profile and
#                                           rotation-concurrency (the rotation of the
#                                           concurrency step's identical arms)
#     and the fault cases of scripts/compose-faults.sh: arm-killed orchestrator-stopped
#     (`make compose-faults`); `images` builds and smoke-tests the GPU host's own Dockerfiles
#     (abserve.Dockerfile, and vllm-cpu.Dockerfile for vLLM's) from a Debian base and a
#     local wheelhouse (about 20 minutes cold; `make compose-images`)
# 1. Engine: Debian's docker.io and Compose v2 installed if missing, dockerd started if none
#    answers (scripts/compose-engine.sh; data root outside the repository).
# 2. Image: the CPU stack's runtime image (scripts/compose-images.sh host: a few files,
#    imported; the containers run the host's /usr, Python and this project read-only).
# 3. Model: the tiny vision-language model abserve builds offline, laid into a Hugging Face
#    cache as the snapshot of the revision configs/cpu-compose.yaml pins.
# 4. Every step runs scripts/signoff.sh (COMPOSE_FILE naming docker-compose.yml and
#    docker-compose.cpu.yml, the one place the CPU stack differs): the orchestrator service runs
#    `abserve run --target compose`, and the step asserts signoff.sh's exit code, the report's
#    verdict and each arm's proof. signoff: configs/cpu-compose.yaml's fixed plan.
#    rotation: scripts/gpu-rotation.sh with 2 blocks (the arms swap cores 0 and 1); asserts
#    the combined report. postgres: the sign-off with its store in PostgreSQL (a server
#    container on the stack's network, docker/compose-check.postgres.yml). arms3: three arms,
#    a, b and a third candidate `hybrid` (lookup hybrid), which docker-compose.yml has no
#    service for: signoff.sh runs it from the compose files compose_env generates; asserts
#    the family's report (both candidates judged against a, Holm-corrected) and every arm's
#    proof in each candidate's report. concurrency: identical arms (both linear) under
#    closed-loop Locust with 4 users: asserts that no arm ever had more than 4 requests in
#    flight (the router added no queue of its own) and that no latency gate failed.
#    decide: the sequential sign-off under a budget, a family on one core: b identical to a
#    (A/A') must PASS and drop (the drop-straddle mutant, an extra arm) must FAIL, and the run
#    must stop decided, before its budget. text-only: arms without a lookup (vLLM untouched,
#    identified by what their servers ran) replaying a text-only traffic file from traffic/:
#    PASS, decided before the budget. ledger-profile: the host's one ledger (profile `ledger`):
#    a sign-off stored in its PostgreSQL, the nightly `from: accepted` refused, then accepted
#    from the host and the nightly against it PASS, and the ledger site (not in the default list).
# 5. Teardown, whatever happened: what this check created and nothing else. Everything it
#    makes carries its own marks: the compose project abserve-check-<id> (compose labels every
#    container, network and volume with com.docker.compose.project) and the label
#    com.abserve.check=<id> on every image it imports or builds (scripts/compose-images.sh);
#    teardown removes exactly those, by label (never a prune of the whole engine), then stops
#    the dockerd this script started (with the firewall rules and bridge it added).
#    ABSERVE_COMPOSE_KEEP_IMAGES=1 keeps the labelled images.
# It refuses to run in a Docker engine that scripts/compose-engine.sh did not start itself
# (one line says so), unless ABSERVE_COMPOSE_USE_ENGINE=1: then it runs there and still
# removes only what it labelled.
# Writes the times of each step to .abserve/compose/times.txt (benchmarks/compose.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CONFIG=configs/cpu-compose.yaml
WORK="$PWD/.abserve/compose"
ENV_FILE="$WORK/cpu.env"
TIMES="$WORK/times.txt"
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(signoff rotation postgres arms3 concurrency decide text-only journey)
PY=.venv/bin/python
# This check's marks (see 5.): its id, its compose project, the label of its images.
export ABSERVE_CHECK_ID="${ABSERVE_CHECK_ID:-$(date -u +%Y%m%d-%H%M%S)-$$}"
export COMPOSE_PROJECT_NAME="abserve-check-$ABSERVE_CHECK_ID"
CHECK_LABEL="com.abserve.check=$ABSERVE_CHECK_ID"
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

remove_labelled() {  # remove_labelled KIND LABEL: the engine's KINDs that carry LABEL, removed
  local kind="$1" label="$2" ids
  local -a rm_cmd
  case "$kind" in
    container) ids="$(docker ps --all --quiet --filter "label=$label" 2>/dev/null)" || true
               rm_cmd=(docker rm --force --volumes) ;;
    network)   ids="$(docker network ls --quiet --filter "label=$label" 2>/dev/null)" || true
               rm_cmd=(docker network rm) ;;
    volume)    ids="$(docker volume ls --quiet --filter "label=$label" 2>/dev/null)" || true
               rm_cmd=(docker volume rm --force) ;;
    image)     ids="$(docker image ls --quiet --filter "label=$label" 2>/dev/null | sort -u)" || true
               rm_cmd=(docker image rm --force) ;;
    *) return 1 ;;
  esac
  [ -n "$ids" ] || return 0
  # shellcheck disable=SC2086  # one id per word
  "${rm_cmd[@]}" $ids >/dev/null 2>&1 || true
  # An image with children (the Debian base of the built images) goes once they are gone.
  if [ "$kind" = image ] && [ "${3:-}" != again ] \
     && [ -n "$(docker image ls --quiet --filter "label=$label" 2>/dev/null)" ]; then
    remove_labelled image "$label" again
  fi
}

teardown() {
  local rc=$?
  log "teardown: compose project $COMPOSE_PROJECT_NAME, images labelled $CHECK_LABEL"
  docker compose --env-file "$ENV_FILE" down --remove-orphans --volumes >/dev/null 2>&1 || true
  docker compose --env-file "$ENV_FILE" -f docker-compose.yml -f docker-compose.cpu.yml \
    -f docker/compose-check.postgres.yml down --remove-orphans --volumes >/dev/null 2>&1 || true
  # Whatever `down` could not reach (a run whose env file was never written, a generated
  # compose file of extra arms): by the project's label, then by the check's own.
  local kind label
  for kind in container network volume; do
    for label in "com.docker.compose.project=$COMPOSE_PROJECT_NAME" "$CHECK_LABEL"; do
      remove_labelled "$kind" "$label"
    done
  done
  [ "${ABSERVE_COMPOSE_KEEP_IMAGES:-0}" = 1 ] || remove_labelled image "$CHECK_LABEL"
  if [ "$engine_running_before" = 0 ] || [ "$engine_was_ours" = 1 ]; then
    [ "${ABSERVE_KEEP_ENGINE:-0}" = 1 ] || scripts/compose-engine.sh stop
  fi
  lap teardown
  log "total $(( $(date +%s) - started_at )) s; exit $rc"
}

check_report() {  # check_report RUN_ID EXPECTED_EXIT ACTUAL_EXIT [--blocks N]  (LOOKUP_B: b's lookup, bisect)
  local run_id="$1" want="$2" got="$3"; shift 3
  [ "$got" = "$want" ] || fail "$run_id: exit code $got, expected $want (see $WORK/runs/$run_id/compose.log)"
  "$PY" -m tests.support.check_report "$WORK/runs/$run_id" --exit-code "$got" \
    --expect "a=${LOOKUP_A:-linear}" --expect "b=${LOOKUP_B:-bisect}" "$@" || fail "$run_id: report check"
}

check_family() {  # check_family RUN_ID EXPECTED_EXIT ACTUAL_EXIT CANDIDATE...: a family's report
  local run_id="$1" want="$2" got="$3"; shift 3
  [ "$got" = "$want" ] || fail "$run_id: exit code $got, expected $want (see $WORK/runs/$run_id/compose.log)"
  "$PY" - "$WORK/runs/$run_id" "$got" "$@" <<'PY' || fail "$run_id: family report check"
import json, sys
from pathlib import Path
out, code, candidates = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
family = json.loads((out / "report.json").read_text())
problems = []
if family.get("exit_code") != code:
    problems.append(f"family exit {family.get('exit_code')}, signoff.sh {code}")
if sorted(family.get("candidates", {})) != sorted(candidates):
    problems.append(f"candidates {sorted(family.get('candidates', {}))}, expected {sorted(candidates)}")
if "Holm" not in str(family.get("correction")):
    problems.append(f"no Holm correction stated: {family.get('correction')!r}")
print("\n".join(problems) or f"family of {candidates}: {family.get('verdict')}; {family.get('correction')}")
sys.exit(1 if problems else 0)
PY
  local candidate vs_code
  for candidate in "$@"; do
    vs_code="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["exit_code"])' \
      "$WORK/runs/$run_id/vs-$candidate/report.json")" || fail "$run_id: no report for $candidate"
    "$PY" -m tests.support.check_report "$WORK/runs/$run_id/vs-$candidate" --exit-code "$vs_code" \
      --expect a=linear --expect b=bisect --expect hybrid=hybrid || fail "$run_id: vs-$candidate report check"
  done
}

check_decided_family() {  # check_decided_family RUN_ID ACTUAL_EXIT: the decide step's family:
  # b (identical to a) passed, drop (the drop-straddle mutant) failed, each arm proved its
  # build, and the run stopped decided before its budget
  local run_id="$1" got="$2"
  [ "$got" = 1 ] || fail "$run_id: exit code $got, expected 1: the mutant fails (see $WORK/runs/$run_id/compose.log)"
  "$PY" - "$WORK/runs/$run_id" <<'PY' || fail "$run_id: decided family check"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
family = json.loads((out / "report.json").read_text())
b, drop = (json.loads((out / f"vs-{arm}" / "report.json").read_text()) for arm in ("b", "drop"))
problems = []
stop = b.get("summary") or {}
if b.get("verdict") != "pass":
    problems.append(f"b (identical to a) is {b.get('verdict')!r}, expected pass: {stop.get('stop_reason')}")
if drop.get("verdict") != "fail":
    problems.append(f"drop (a mutant) is {drop.get('verdict')!r}, expected fail")
if stop.get("decided") is not True:
    problems.append(f"the run did not stop decided: {stop.get('stop_reason')!r}")
proofs = {arm: (drop if arm == "drop" else b)["arms"][arm]["proven_lookup"] for arm in ("a", "b", "drop")
          if arm in (drop if arm == "drop" else b)["arms"]}
if proofs != {"a": "linear", "b": "linear", "drop": "linear+drop-straddle"}:
    problems.append(f"proofs {proofs}")
print("\n".join(problems) or f"family {family.get('verdict')}: b pass, drop fail, decided after "
      f"{stop.get('requests')} requests ({stop.get('stop_reason')}); proofs {proofs}")
sys.exit(1 if problems else 0)
PY
}

in_postgres() {  # in_postgres COMMAND...: COMMAND with the stack's store in PostgreSQL (a server
  # container on the stack's network, docker/compose-check.postgres.yml)
  local pg_password
  pg_password="$(sed -n 's/^ABSERVE_PG_PASSWORD=//p' "$ENV_FILE")"
  COMPOSE_FILE="$COMPOSE_FILE:docker/compose-check.postgres.yml" \
    ABSERVE_DATABASE_URL="postgresql+psycopg://abserve:$pg_password@postgres:5432/abserve" "$@"
}

no_sqlite_beside() {  # no_sqlite_beside RUN_ID: a run stored in PostgreSQL wrote no SQLite store
  [ ! -e "$WORK/runs/$1/abserve.db" ] || fail "$1: a SQLite store was written beside PostgreSQL"
}

# Derived configs and traffic files live where the stack mounts them (configs/ and traffic/ of
# the checkout, as on a GPU host), in folders git ignores: configs/local/compose-check/ and
# traffic/compose-check/. abserve.deploy.check_configs writes each step's config (edits of
# $CONFIG) and prints its path; tests/unit/deploy/test_documented_configs.py builds the same
# files and checks that `abserve check` accepts each.
derived() {  # derived STEP: the config of STEP (arms3 decide text-only concurrency faults)
  "$PY" -m abserve.deploy.check_configs "$1"
}

decide_config() { derived decide; }          # a family on one core: b identical to a, drop the
                                             # drop-straddle mutant; sequential under a budget
text_only_config() { derived text-only; }    # arms without a lookup replaying a text-only file
concurrency_config() { derived concurrency; }  # identical arms (both linear) under 4 users

check_concurrency() {  # check_concurrency DB RUN_ID REPORT_JSON: identical arms under 4 users
  # never had more than 4 requests in flight (the router added no queue of its own), had more
  # than one (the load was concurrent), and failed no latency gate
  "$PY" - "$@" <<'PY' || fail "$2: concurrency check"
import json, sys
from abserve.compare.pacing import peak_in_flight
from abserve.store import Store
store = Store.open(f"sqlite:///{sys.argv[1]}")
try:
    exchanges = list(store.iter_exchanges(sys.argv[2]))
finally:
    store.close()
report = json.loads(open(sys.argv[3]).read())
peaks = {arm: peak_in_flight(exchanges, arm) for arm in ("a", "b")}
fails = [m.get("metric") or m.get("name") for m in report.get("metrics", []) if m.get("outcome") == "fail"]
problems = [f"arm {a}: {n} requests in flight at once, above the 4 users" for a, n in peaks.items() if n > 4]
problems += [f"arm {a}: never more than one request in flight: the load was not concurrent"
             for a, n in peaks.items() if n < 2]
problems += [f"latency gate(s) failed on identical arms: {fails}"] if fails else []
print(f"{len(exchanges)} exchanges, peak in flight {peaks}, verdict {report.get('verdict')}, "
      f"latency fails {fails or 'none'}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
}

rotate() {  # rotate CONFIG: scripts/gpu-rotation.sh with 2 blocks (the arms swap cores 0 and 1);
  # sets rotation (the combined run's id) and code (its report's exit code)
  scripts/gpu-rotation.sh "$1" 2 0 1 > "$WORK/rotation.log" 2>&1 || true
  cat "$WORK/rotation.log"
  # (its last line: "gpu-rotation: combined report in RUNS_DIR/ROTATION (exit CODE)")
  code="$(sed -n 's/^gpu-rotation: combined report in .* (exit \([0-9]*\))$/\1/p' "$WORK/rotation.log")"
  rotation="$(sed -n 's/^gpu-rotation: combined report in \(.*\/\)\{0,1\}\([^ /]*\) (exit [0-9]*)$/\2/p' "$WORK/rotation.log")"
  [ -n "$rotation" ] || fail "the rotation wrote no combined report (see $WORK/rotation.log)"
}

# Sourced (tests/unit/deploy/test_compose_check_teardown.py): the functions above only.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

mkdir -p "$WORK"
: > "$TIMES"
engine_was_ours=0
[ -f "${ABSERVE_DOCKER_ROOT:-/var/lib/abserve-docker}/dockerd.pid" ] && engine_was_ours=1
engine_running_before=0
docker info >/dev/null 2>&1 && engine_running_before=1

# --- 1. engine (before the teardown trap: an engine refused is left entirely alone) ------
scripts/compose-engine.sh start
trap teardown EXIT
trap 'exit 130' INT TERM
lap engine

# --- 2. images -------------------------------------------------------------------------------
scripts/compose-images.sh host
lap images

# The host's one ledger (docker-compose.yml's profile `ledger`, docs/gpu.md "One ledger on the
# host"), as the page runs it: a sign-off stored in the profile's PostgreSQL (ledger-db, its data
# in the named volume), the nightly `from: accepted` refused while nothing is accepted, the
# sign-off accepted from the host (`abserve accept` in the orchestrator's container), the nightly
# against it (arm a: the image that sign-off recorded it ran, pinned by its id), the ledger site.
ledger_profile() (
  export ABSERVE_LEDGER_PASSWORD ABSERVE_DATABASE_URL ABSERVE_UID ABSERVE_GID
  ABSERVE_LEDGER_PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_hex(16))')"
  ABSERVE_DATABASE_URL="postgresql+psycopg://abserve:$ABSERVE_LEDGER_PASSWORD@ledger-db:5432/abserve"
  ABSERVE_UID="$(id -u)" ABSERVE_GID="$(id -g)"
  local first nightly refused second code stack=(docker compose --profile ledger --env-file "$ENV_FILE")
  first="check-ledger-first-$(date -u +%Y%m%d-%H%M%S)"
  code=0
  ABSERVE_RUN_ID_OVERRIDE="$first" ABSERVE_GPU_B=0 scripts/signoff.sh "$(text_only_config)" || code=$?
  LOOKUP_A=identified LOOKUP_B=identified check_report "$first" 0 "$code" --decided --min-exchanges 20
  no_sqlite_beside "$first"
  nightly=configs/local/compose-check/cpu-compose-nightly.yaml
  cat > "$nightly" <<'YAML'
# compose-check's ledger-profile step: the text-only sign-off against its accepted release.
extends: cpu-compose-text.yaml
arms:
  a: {from: accepted}
  b: {image: "abserve/host-runtime:local"}   # an image, as arm a's: the CPU override runs the host's vLLM
YAML
  refused="check-ledger-refused-$(date -u +%Y%m%d-%H%M%S)"
  code=0
  ABSERVE_RUN_ID_OVERRIDE="$refused" scripts/signoff.sh "$nightly" || code=$?
  [ "$code" = 4 ] || fail "$refused: the nightly with nothing accepted exited $code, expected 4 (refused)"
  "${stack[@]}" up -d --wait ledger-db
  "${stack[@]}" run --rm --no-deps -T --entrypoint abserve orchestrator accept "$first" --as v1 \
    || fail "abserve accept $first in the orchestrator's container"
  second="check-ledger-nightly-$(date -u +%Y%m%d-%H%M%S)"
  code=0
  ABSERVE_RUN_ID_OVERRIDE="$second" ABSERVE_GPU_B=0 scripts/signoff.sh "$nightly" || code=$?
  # arm a: the image the first sign-off recorded it ran (REF@sha256:ID), tagged by that id
  pinned="$(sed -n 's/^ABSERVE_VLLM_IMAGE_A=//p' "$WORK/runs/$second/compose.env")"
  [[ "$pinned" =~ ^abserve/accepted:[0-9a-f]{12}$ ]] || fail "$second: arm a is $pinned, not the accepted image"
  [ "$(docker image inspect -f '{{.Id}}' "$pinned" | cut -c8-19)" = "${pinned#*:}" ] \
    || fail "$second: $pinned is not the image id it names"
  LOOKUP_A=identified LOOKUP_B=identified check_report "$second" 0 "$code" --decided --min-exchanges 20
  "$PY" - "$WORK/runs/$second/report.json" "$first" <<'PY' || fail "$second: the report does not name the accepted release"
import json, sys
text = json.dumps(json.load(open(sys.argv[1])))
sys.exit(0 if sys.argv[2] in text and "v1" in text else 1)
PY
  "${stack[@]}" up -d --wait ledger-db
  "${stack[@]}" run --rm --no-deps -T --entrypoint abserve orchestrator ledger --out "/runs/$second/ledger-site" \
    || fail "abserve ledger in the orchestrator's container"
  for run in "$first" "$second"; do
    grep -q "$run" "$WORK/runs/$second/ledger-site/index.html" || fail "the ledger site does not list $run"
  done
  "${stack[@]}" stop ledger-db >/dev/null
  # A PostgreSQL outside the stack (docker/compose.ledger-network.yml): the profile's server run
  # by another compose project stands in for a team's; the orchestrator alone joins its network.
  local team="$COMPOSE_PROJECT_NAME-team" outside=(docker compose --env-file "$ENV_FILE")
  trap 'COMPOSE_PROJECT_NAME="$team" docker compose --profile ledger --env-file "$ENV_FILE" down --volumes >/dev/null 2>&1' EXIT
  COMPOSE_PROJECT_NAME="$team" "${stack[@]}" up -d --wait ledger-db
  COMPOSE_FILE="$COMPOSE_FILE:docker/compose.ledger-network.yml" ABSERVE_LEDGER_NETWORK="${team}_backend" \
    "${outside[@]}" run --rm --no-deps -T --entrypoint abserve orchestrator ledger --out "/runs/$second/team-site" \
    || fail "abserve ledger on a PostgreSQL outside the stack (docker/compose.ledger-network.yml)"
  [ -s "$WORK/runs/$second/team-site/index.html" ] || fail "no ledger site from the PostgreSQL outside the stack"
  log "ledger-profile: $first accepted as v1 in the profile's PostgreSQL; $second against it passed;" \
    "a PostgreSQL outside the stack reached through docker/compose.ledger-network.yml"
)

# --- 3. the model in a Hugging Face cache, at the pinned revision ---------------------------
model_id="$(sed -n 's/^  id: *//p' "$CONFIG" | head -n 1)"
revision="$(sed -n 's/^  revision: *\([0-9a-f]*\).*/\1/p' "$CONFIG" | head -n 1)"
[ ${#revision} -eq 40 ] || fail "$CONFIG must pin a 40-hex revision"
[ -f .abserve/models/tiny-llava/config.json ] || "$PY" -m abserve build-model --out .abserve/models/tiny-llava
snapshot="$WORK/hf-cache/hub/models--${model_id//\//--}/snapshots/$revision"
rm -rf "$WORK/hf-cache"
mkdir -p "$snapshot"
cp .abserve/models/tiny-llava/* "$snapshot/"

cat > "$ENV_FILE" <<ENV
# Written by scripts/compose-check.sh for the CPU stack (regenerated every run).
ABSERVE_RUNS_DIR=$WORK/runs
ABSERVE_HF_CACHE=$WORK/hf-cache
ABSERVE_FETCH_OFFLINE=1
ABSERVE_GPU_A=0
ABSERVE_GPU_B=1
ABSERVE_GPU_A2=0
ABSERVE_HOST_PYTHON=$("$PY" -c 'import sys; print(sys.base_prefix)')
ABSERVE_HOST_PROJECT=$PWD
ABSERVE_SHM_SIZE=1gb
ABSERVE_ARM_HEALTH_INTERVAL=3s
ABSERVE_PG_PASSWORD=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
ENV
# The experiment section, as .env.example carries the 3B config's (signoff.sh derives it
# again per run; `docker compose build` needs the file to interpolate).
"$PY" -m abserve.deploy.compose_env "$CONFIG" >> "$ENV_FILE"
mkdir -p "$WORK/runs"
lap model

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
      rotate "$CONFIG"
      check_report "$rotation" 2 "$code" --blocks 2
      lap rotation ;;
    rotation-concurrency)
      # the rotation of identical arms under 4 users: both placements of what `concurrency`
      # asserts, and what `rotation` asserts of the combined report (a and b both linear; as in
      # `concurrency`, batch noise may move their outputs: only incomparable exchanges count;
      # arms3-postgres asserts a and b bisect identical)
      rotate "$(concurrency_config)"
      [ "$code" -lt 3 ] || fail "$rotation: exit code $code: no valid run (see $WORK/rotation.log)"
      LOOKUP_B=linear check_report "$rotation" "$code" "$code" --blocks 2 --batch-noise
      check_concurrency "$WORK/runs/$rotation/abserve.db" "$rotation" "$WORK/runs/$rotation/report.json"
      lap rotation-concurrency ;;
    postgres)
      run_id="check-postgres-$(date -u +%Y%m%d-%H%M%S)"
      code=0
      ABSERVE_RUN_ID_OVERRIDE="$run_id" in_postgres scripts/signoff.sh "$CONFIG" || code=$?
      check_report "$run_id" 2 "$code"
      no_sqlite_beside "$run_id"
      lap postgres ;;
    arms3|arms3-postgres)
      # configs/cpu-compose.yaml plus a third candidate arm (written under .abserve/, which
      # the CPU stack's containers see at /app like the rest of the checkout); arms3-postgres:
      # the same with the store in PostgreSQL (both steps' evidence in one stack bring-up).
      # (no router entry for hybrid: the router's arms are derived from arms:)
      # 40 requests: the plan must decide the policy's required shift gates (the reachability
      # check refuses 16), so the verdict is whatever those pairs say: any judged run (0-2).
      config3="$(derived arms3)"
      run_id="check-$step-$(date -u +%Y%m%d-%H%M%S)"
      store=()
      [ "$step" = arms3 ] || store=(in_postgres)
      code=0
      ABSERVE_RUN_ID_OVERRIDE="$run_id" "${store[@]}" scripts/signoff.sh "$config3" || code=$?
      [ -s "$WORK/runs/$run_id/arms.0.yml" ] || fail "$run_id: no generated compose file for arm hybrid"
      [ "$code" -lt 3 ] || fail "$run_id: exit code $code: no judged run (see $WORK/runs/$run_id/compose.log)"
      check_family "$run_id" "$code" "$code" b hybrid
      [ "$step" = arms3 ] || no_sqlite_beside "$run_id"
      lap "$step" ;;
    concurrency)
      configc="$(concurrency_config)"
      run_id="check-concurrency-$(date -u +%Y%m%d-%H%M%S)"
      code=0
      ABSERVE_RUN_ID_OVERRIDE="$run_id" scripts/signoff.sh "$configc" || code=$?
      [ "$code" -lt 3 ] || fail "$run_id: exit code $code: no valid run (see $WORK/runs/$run_id/compose.log)"
      check_concurrency "$WORK/runs/$run_id/abserve.db" "$run_id" "$WORK/runs/$run_id/report.json"
      lap concurrency ;;
    decide|decide-postgres)
      # all three arms on core 0 (time-sliced alike, as the CPU default's arms); decide-postgres:
      # the same with the store in PostgreSQL (what the postgres step asserts, in this bring-up)
      run_id="check-$step-$(date -u +%Y%m%d-%H%M%S)"
      store=()
      [ "$step" = decide ] || store=(in_postgres)
      code=0
      ABSERVE_RUN_ID_OVERRIDE="$run_id" ABSERVE_GPU_B=0 "${store[@]}" scripts/signoff.sh "$(decide_config)" || code=$?
      [ -s "$WORK/runs/$run_id/arms.0.yml" ] || fail "$run_id: no generated compose file for arm drop"
      check_decided_family "$run_id" "$code"
      [ "$step" = decide ] || no_sqlite_beside "$run_id"
      lap "$step" ;;
    journey)
      # the GPU engineer's journey: every shell block of the GPU pages run as written, in a
      # fresh copy of the checkout, on a stand-in GPU host (tests/support/gpu_journey.py)
      "$PY" -m tests.support.gpu_journey "$WORK/journey" || fail "the GPU journey (its FAILED lines above)"
      lap journey ;;
    ledger-profile)
      ledger_profile
      lap ledger-profile ;;
    text-only)
      run_id="check-text-only-$(date -u +%Y%m%d-%H%M%S)"
      code=0
      ABSERVE_RUN_ID_OVERRIDE="$run_id" ABSERVE_GPU_B=0 scripts/signoff.sh "$(text_only_config)" || code=$?
      LOOKUP_A=identified LOOKUP_B=identified check_report "$run_id" 0 "$code" --decided \
        --min-exchanges 20
      lap text-only ;;
    images)
      scripts/compose-images.sh dockerfiles
      lap images ;;
    arm-killed|orchestrator-stopped)
      fault_step "$step"
      lap "$step" ;;
    *) fail "unknown step $step (signoff, rotation, postgres, arms3, arms3-postgres, concurrency, rotation-concurrency, decide, decide-postgres, text-only, ledger-profile, journey, images, arm-killed, orchestrator-stopped)" ;;
  esac
done
log "all steps passed: ${STEPS[*]}"
