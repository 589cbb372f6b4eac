#!/bin/sh
# Lays out one run's directories before anything starts, owned by the user the abserve
# containers run as: runs/<id>/telemetry/<arm> for each arm the experiment has
# ($ABSERVE_ARMS, from the config: the report expects exactly those arms), runs/<id>/load,
# and reports/. Refuses a run id that already has a store: runs are never overwritten.
set -eu
runs="${ABSERVE_RUNS_ROOT:-/runs}"
reports="${ABSERVE_REPORTS_ROOT:-/reports}"
run_dir="$runs/${ABSERVE_RUN_ID:?}"
owner="${ABSERVE_UID:?}:${ABSERVE_GID:?}"
arms="${ABSERVE_ARMS:-a b}"
if [ -e "$run_dir/abserve.db" ]; then
  echo "prepare: run '$ABSERVE_RUN_ID' already has a store ($run_dir/abserve.db);" \
       "set a new ABSERVE_RUN_ID (scripts/signoff.sh makes one per run)" >&2
  exit 1
fi
mkdir -p "$run_dir/load" "$run_dir/telemetry" "$reports"
for arm in $arms; do
  case "$arm" in
    a|b|a2) mkdir -p "$run_dir/telemetry/$arm" ;;
    *) echo "prepare: unknown arm '$arm' in ABSERVE_ARMS (a, b, a2)" >&2; exit 1 ;;
  esac
done
rm -f "$run_dir/load/exit_code"
chown "$owner" "$runs" "$run_dir" "$run_dir/load" "$run_dir/telemetry" "$reports"
echo "prepare: $run_dir ready for $owner (arms: $arms)"
