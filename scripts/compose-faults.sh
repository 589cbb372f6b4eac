# Fault cases on the real compose stack, sourced by scripts/compose-check.sh (its CONFIG, WORK,
# ENV_FILE, PY, log, fail and check_report are in scope). Each starts scripts/signoff.sh in
# the background, waits until some exchanges are stored, breaks one piece the way it breaks on
# a GPU host, and asserts what the sign-off then says:
#   arm-killed      `docker compose kill vllm-b`: invalid (exit 3), the reason names arm b,
#                   every exchange stored before the kill still there.
#   worker-killed   `docker compose kill locust-worker`: the load ends at once (no wait for
#                   its deadline), invalid (exit 3) because a Locust worker was lost.
#   router-restart  `docker compose restart router`: the router drains, comes back, reopens
#                   the same run (ABSERVE_ROUTER_RESUME) and the load goes on (its client sends
#                   what reached nobody again); the run completes with every exchange of both
#                   halves, the report states the restart, and the verdict is the ordinary one.
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

# run_fault STEP RUN_ID ACTION: the sign-off with ACTION (a compose command line) once
# FAULT_AFTER exchanges are stored; sets fault_code (signoff.sh's exit) and fault_before
# (the exchanges stored when the fault was injected).
run_fault() {
  local step="$1" run_id="$2" action="$3" waited=0
  log "$step: sign-off $run_id; '$action' once $FAULT_AFTER exchanges are stored"
  ABSERVE_RUN_ID_OVERRIDE="$run_id" scripts/signoff.sh "$CONFIG" > "$WORK/$run_id.log" 2>&1 &
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
      "$PY" -m abserve.deploy.check_report "reports/$run_id" --exit-code "$fault_code" \
        --invalid-because "arm 'b'" --min-exchanges "$fault_before" || fail "$step: report check" ;;
    worker-killed)
      local started; started=$(date +%s)
      run_fault "$step" "$run_id" "kill locust-worker"
      [ $(( $(date +%s) - started )) -lt 900 ] || fail "$step: the load waited for its dead worker"
      "$PY" -m abserve.deploy.check_report "reports/$run_id" --exit-code "$fault_code" \
        --invalid-because "worker was lost" --min-exchanges "$fault_before" || fail "$step: report check" ;;
    router-restart)
      run_fault "$step" "$run_id" "restart router"
      check_report "$run_id" 2 "$fault_code" --min-exchanges "$fault_before"
      grep -q "The router restarted 1 time" "reports/$run_id/report.md" || fail "$step: the report does not state the restart" ;;
    *) fail "unknown fault step $step" ;;
  esac
}
