#!/bin/sh
# Lays out one run's directories before anything starts, owned by the user the abserve
# containers run as: runs/<id>/telemetry/<arm> (written by the vLLM arms), runs/<id>/load,
# and reports/. Refuses a run id that already has a store: runs are never overwritten.
set -eu
run_dir="/runs/${ABSERVE_RUN_ID:?}"
owner="${ABSERVE_UID:?}:${ABSERVE_GID:?}"
if [ -e "$run_dir/abserve.db" ]; then
  echo "prepare: run '$ABSERVE_RUN_ID' already has a store ($run_dir/abserve.db);" \
       "set a new ABSERVE_RUN_ID (scripts/signoff.sh makes one per run)" >&2
  exit 1
fi
mkdir -p "$run_dir/load" "$run_dir/telemetry/a" "$run_dir/telemetry/b" "$run_dir/telemetry/a2" /reports
rm -f "$run_dir/load/exit_code"
chown "$owner" /runs "$run_dir" "$run_dir/load" "$run_dir/telemetry" /reports
echo "prepare: $run_dir ready for $owner"
