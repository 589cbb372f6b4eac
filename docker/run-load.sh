#!/bin/sh
# The Locust master of a compose run: sends each profile of $ABSERVE_LOAD_PLAN
# ("profile:requests[:key=value;key=value] ...", written by abserve.deploy.compose_env from
# the experiment config; the overrides go to --abserve-set) through the router, one profile after another,
# with $ABSERVE_LOCUST_WORKERS workers (`docker compose up --scale locust-worker=N` must
# match). The traffic options are loadtest/locustfile.py's own `--abserve-*` options, the
# same ones `abserve load` passes on the CPU path. Finally writes the exit code where the
# router waits for it, and exits 0: a load that stopped early (its error-rate guard, exit 3;
# a lost worker, exit 4) is data for the report, which records it from load/exit_code and
# the profiles' summaries and judges the run invalid with the reason
# (abserve.deploy.record_load); a non-zero exit here would keep the report from running.
# A failed request is data, not a failed load: Locust would exit 1 on the first one
# (--exit-code-on-error), stop the plan and keep the report from running; the error rate is
# the policy's to judge (max_error_rate), and the locustfile itself stops a profile whose
# error rate is over the limit (exit 3). Every profile has a deadline (--run-time,
# $ABSERVE_LOAD_DEADLINE_S), and the master waits for its workers only so long
# (--expect-workers-max-wait), so a dead worker cannot hang the run.
set -uf  # -f: plan items hold brackets, which must not glob
out="${ABSERVE_LOAD_OUT:?}"
workers="${ABSERVE_LOCUST_WORKERS:-1}"
users="${ABSERVE_LOAD_USERS:-8}"
deadline="${ABSERVE_LOAD_DEADLINE_S:-3600}"
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
    --expect-workers "$workers" --expect-workers-max-wait 300 \
    --users "$users" --spawn-rate "$users" --run-time "${deadline}s" --exit-code-on-error 0 \
    --host "${ABSERVE_TARGET:?}" \
    --abserve-profile "$profile" --abserve-requests "$requests" \
    --abserve-run-id "${ABSERVE_RUN_ID:?}" --abserve-out "$out/$profile" \
    --abserve-shards "$workers" --abserve-set "$overrides" || { rc=$?; break; }
done
echo "$rc" > "$out/exit_code.tmp" && mv "$out/exit_code.tmp" "$out/exit_code" || exit 1
[ "$rc" = 0 ] || echo "run-load: the load stopped early (exit $rc); the report will say why" >&2
exit 0
