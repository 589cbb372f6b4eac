# Fault cases on the real compose stack, sourced by scripts/compose-check.sh (its CONFIG, WORK,
# ENV_FILE, PY, log, fail and check_report are in scope). Each starts scripts/signoff.sh in
# the background, waits until some exchanges are stored, breaks one piece the way it breaks on
# a GPU host, and asserts what the sign-off then says:
#   arm-killed           `docker compose kill vllm-b`: the orchestrator's watch stops the load
#                        at once; invalid (exit 3), the reason names arm b, every exchange
#                        stored before the kill still there.
#   orchestrator-stopped `docker compose stop orchestrator` (SIGTERM, as a host shutting down
#                        or a CI job cancelled): the run stops its router (which drains and
#                        stores what it acknowledged) and its load, is marked interrupted, and
#                        signoff.sh exits 130; `abserve report` judges it invalid, with every
#                        exchange stored before the stop.
# (The router and Locust are the orchestrator's own processes: their faults are the CPU path's
# tests/e2e cases, the same code.)
# shellcheck shell=bash

FAULT_AFTER=${ABSERVE_FAULT_AFTER:-3}  # exchanges stored before the fault

stored() {  # stored RUN_ID: exchanges in the run's SQLite store so far (0 before it exists)
  "$PY" - "$WORK/runs/$1/abserve.db" <<'PY'
import sqlite3, sys
from pathlib import Path
path = Path(sys.argv[1])
if not path.exists():
    print(0)
    raise SystemExit
try:
    with sqlite3.connect(path, timeout=5) as db:  # not mode=ro: a WAL reader needs the -shm file
        print(db.execute("select count(*) from abserve_exchanges").fetchone()[0])
except sqlite3.Error:
    print(0)
PY
}

fault_compose() {  # fault_compose RUN_ID ARGS...: docker compose on that run's stack
  local run_id="$1"; shift
  docker compose --env-file "$ENV_FILE" --env-file "$WORK/runs/$run_id/compose.env" "$@"
}

fault_config() {  # configs/cpu-compose.yaml with 48 requests per profile: under the one
  # orchestrator its 16 requests are sent within seconds, before a fault could land mid-load
  "$PY" -m abserve.deploy.check_configs faults
}

# run_fault STEP RUN_ID ACTION: the sign-off with ACTION (a compose command line) once
# FAULT_AFTER exchanges are stored; sets fault_code (signoff.sh's exit) and fault_before
# (the exchanges stored when the fault was injected).
run_fault() {
  local step="$1" run_id="$2" action="$3" waited=0
  log "$step: sign-off $run_id; '$action' once $FAULT_AFTER exchanges are stored"
  ABSERVE_RUN_ID_OVERRIDE="$run_id" scripts/signoff.sh "$(fault_config)" > "$WORK/$run_id.log" 2>&1 &
  local pid=$!
  while [ "$(stored "$run_id")" -lt "$FAULT_AFTER" ]; do
    kill -0 "$pid" 2>/dev/null || fail "$step: the sign-off ended before the fault (see $WORK/$run_id.log)"
    [ "$waited" -lt 900 ] || fail "$step: $FAULT_AFTER exchanges not stored within 900 s"
    sleep 2
    waited=$((waited + 2))
  done
  fault_before="$(stored "$run_id")"
  # shellcheck disable=SC2086  # ACTION is a command line on purpose
  fault_compose "$run_id" $action || fail "$step: '$action' failed"
  log "$step: '$action' done with $fault_before exchanges stored"
  fault_code=0
  wait "$pid" || fault_code=$?
  log "$step: signoff.sh exited $fault_code"
}

fault_step() {  # fault_step STEP: one of the cases above
  local step="$1" run_id
  run_id="check-$step-$(date -u +%Y%m%d-%H%M%S)"
  case "$step" in
    arm-killed)
      run_fault "$step" "$run_id" "kill vllm-b"
      "$PY" -m tests.support.check_report "$WORK/runs/$run_id" --exit-code "$fault_code" \
        --invalid-because "arm 'b'" --min-exchanges "$fault_before" || fail "$step: report check" ;;
    orchestrator-stopped)
      run_fault "$step" "$run_id" "stop orchestrator"
      [ "$fault_code" = 130 ] || fail "$step: signoff.sh exited $fault_code, expected 130 (interrupted)"
      local code=0
      "$PY" -m abserve report "$run_id" --db "sqlite:///$WORK/runs/$run_id/abserve.db" \
        --out "$WORK/runs/$run_id/rejudged" >/dev/null || code=$?
      "$PY" -m tests.support.check_report "$WORK/runs/$run_id/rejudged" --exit-code "$code" \
        --invalid-because "interrupted" --min-exchanges "$fault_before" || fail "$step: report check" ;;
    *) fail "unknown fault step $step" ;;
  esac
}
