#!/bin/sh
# Lays out one run's folder before anything starts, owned by the user the abserve containers run
# as: runs/<id>/telemetry/<arm> for each arm the experiment has ($ABSERVE_ARMS, from the config),
# where each arm's plugin writes what it ran and the orchestrator reads it (the arm's proof).
# Runs are never overwritten: a run id that already has a store is refused, except the default
# id `manual` of a plain `docker compose up`, whose earlier run is moved aside to
# runs/manual-<time>/ (scripts/signoff.sh makes a new id per run).
set -eu
runs="${ABSERVE_RUNS_ROOT:-/runs}"
run_dir="$runs/${ABSERVE_RUN_ID:?}"
owner="${ABSERVE_UID:?}:${ABSERVE_GID:?}"
arms="${ABSERVE_ARMS:-a b}"
if [ -e "$run_dir/abserve.db" ] || [ -e "$run_dir/report.json" ]; then
  if [ "$ABSERVE_RUN_ID" != manual ]; then
    echo "prepare: run '$ABSERVE_RUN_ID' already has a store ($run_dir/abserve.db);" \
         "set a new ABSERVE_RUN_ID (scripts/signoff.sh makes one per run)" >&2
    exit 1
  fi
  kept="$run_dir-$(date -u +%Y%m%d-%H%M%S)"
  mv "$run_dir" "$kept"
  echo "prepare: the earlier run 'manual' moved to $kept"
fi
rm -rf "$run_dir/telemetry"  # telemetry of an earlier start must not prove this run's arms
mkdir -p "$run_dir/telemetry"
for arm in $arms; do
  # a, b, a2, or an extra arm of the config (abserve.deploy.compose_env: a lower-case letter,
  # then lower-case letters or digits), which has a service vllm-<arm> of its own.
  case "$arm" in
    [a-z]*[!a-z0-9]*|[!a-z]*) echo "prepare: arm '$arm' in ABSERVE_ARMS is not an arm name" >&2; exit 1 ;;
    *) mkdir -p "$run_dir/telemetry/$arm" ;;
  esac
done
# Each arm runs as the same user (docker-compose.yml) and writes its own folder.
chown "$owner" "$runs" "$run_dir"
chown -R "$owner" "$run_dir/telemetry"
echo "prepare: $run_dir ready for $owner (arms: $arms)"
