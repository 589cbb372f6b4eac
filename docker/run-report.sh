#!/bin/sh
# The report service: first record each arm's lookup proof from the telemetry volume into
# the store (`abserve prove`; compose, not abserve, started the arms), then judge and write
# the report (`abserve report "$@"`), exiting with the verdict's code (0/1/2/3).
# The noise-floor arm a2 is expected only when its telemetry directory exists.
set -eu
run_id="${1:?usage: run-report.sh RUN_ID --db URL --out DIR --policy FILE}"
root="${ABSERVE_TELEMETRY_ROOT:?ABSERVE_TELEMETRY_ROOT is not set}"
db="${ABSERVE_DATABASE_URL:-sqlite:////runs/$run_id/abserve.db}"

set -- "$@"
expect="--expect a=linear --expect b=bisect"
if [ -d "$root/a2" ]; then
  expect="$expect --expect a2=linear"
fi
# shellcheck disable=SC2086  # $expect is a list of words on purpose
abserve prove "$run_id" --db "$db" --telemetry-root "$root" $expect
exec abserve report "$@"
