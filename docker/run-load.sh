#!/bin/sh
# The Locust master of a compose run: sends each profile of $ABSERVE_LOAD_PLAN
# ("profile:requests[:key=value;key=value] ...", written by abserve.deploy.compose_env from
# the experiment config; the overrides go to --abserve-set) through the router, one profile after another,
# with $ABSERVE_LOCUST_WORKERS workers (`docker compose up --scale locust-worker=N` must
# match). The traffic options are loadtest/locustfile.py's own `--abserve-*` options, the
# same ones `abserve load` passes on the CPU path. Finally writes the exit code where the
# router waits for it, and exits with it.
set -uf  # -f: plan items hold brackets, which must not glob
out="${ABSERVE_LOAD_OUT:?}"
workers="${ABSERVE_LOCUST_WORKERS:-1}"
users="${ABSERVE_LOAD_USERS:-8}"
[ "$users" -ge "$workers" ] || users="$workers"  # every worker needs a user
mkdir -p "$out"
rc=0
for item in ${ABSERVE_LOAD_PLAN:?}; do
  profile="${item%%:*}"
  rest="${item#*:}"
  requests="${rest%%:*}"
  overrides="${rest#*:}"
  [ "$overrides" = "$rest" ] && overrides=""
  echo "run-load: $profile, $requests requests, $users users on $workers worker(s)" >&2
  locust -f /app/loadtest/locustfile.py --headless --master \
    --expect-workers "$workers" --users "$users" --spawn-rate "$users" \
    --host "${ABSERVE_TARGET:?}" \
    --abserve-profile "$profile" --abserve-requests "$requests" \
    --abserve-run-id "${ABSERVE_RUN_ID:?}" --abserve-out "$out/$profile" \
    --abserve-shards "$workers" --abserve-set "$overrides" || { rc=$?; break; }
done
echo "$rc" > "$out/exit_code.tmp" && mv "$out/exit_code.tmp" "$out/exit_code"
exit "$rc"
