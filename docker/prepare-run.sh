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
  # a, b, a2, or an extra arm of the config (abserve.deploy.compose_env: a lower-case letter,
  # then lower-case letters or digits), which has a service vllm-<arm> of its own.
  case "$arm" in
    [a-z]*[!a-z0-9]*|[!a-z]*) echo "prepare: arm '$arm' in ABSERVE_ARMS is not an arm name" >&2; exit 1 ;;
    *) mkdir -p "$run_dir/telemetry/$arm" ;;
  esac
done
rm -f "$run_dir/load/exit_code"
chown "$owner" "$runs" "$run_dir" "$run_dir/load" "$run_dir/telemetry" "$reports"
echo "prepare: $run_dir ready for $owner (arms: $arms)"
