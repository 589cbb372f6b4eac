#!/bin/sh
# Runs the abserve router (`abserve router --config FILE`) until the load generator writes
# its exit code to $ABSERVE_LOAD_DONE, then stops it with SIGTERM so that it drains the
# streams in flight, flushes the store and marks the run completed before the report
# reads it. Exits with the router's own exit code (a router that dies early ends the run).
set -u
config="${1:?usage: run-router.sh CONFIG}"
done_file="${ABSERVE_LOAD_DONE:?ABSERVE_LOAD_DONE is not set}"

abserve router --config "$config" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT

while [ ! -e "$done_file" ] && kill -0 "$pid" 2>/dev/null; do
  sleep 1
done
stopped=0
if kill -0 "$pid" 2>/dev/null; then
  echo "run-router: load finished (exit code $(cat "$done_file")); stopping the router" >&2
  kill -TERM "$pid"
  stopped=1
fi
wait "$pid"
rc=$?
# Stopped by us once the load was done: the router drains, flushes and ends by the SIGTERM we
# sent (status 143), which is its normal end here, not a failure (the report waits for it).
if [ "$stopped" = 1 ] && [ "$rc" = 143 ]; then
  rc=0
fi
exit "$rc"
