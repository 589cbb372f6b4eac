#!/bin/sh
# The report service: first record each arm's lookup proof from the telemetry volume into
# the store (`abserve prove`; compose, not abserve, started the arms), then judge and write
# the report (`abserve report "$@"`), exiting with the verdict's code (0/1/2/3).
# Both read the store named by the report's own --db (SQLite or PostgreSQL alike), and the
# arms proven are exactly the experiment's ($ABSERVE_ARMS: a b, or a b a2 with the floor).
# A proof that cannot be recorded (no such run, store unreachable) is an error, exit 4,
# never a verdict: scripts/signoff.sh reports it as a crashed report (invalid).
set -eu
run_id="${1:?usage: run-report.sh RUN_ID --db URL --out DIR --policy FILE}"
root="${ABSERVE_TELEMETRY_ROOT:?ABSERVE_TELEMETRY_ROOT is not set}"
db=""
prev=""
for arg in "$@"; do
  [ "$prev" = "--db" ] && db="$arg"
  prev="$arg"
done
[ -n "$db" ] || { echo "run-report: no --db URL among the arguments" >&2; exit 4; }

# The lookup each arm must prove: $ABSERVE_ARM_LOOKUPS ("a=linear b=bisect a2=linear", built
# by docker-compose.yml from the same ABSERVE_LOOKUP_<ARM> variables its arm services run),
# else the compose file's defaults.
lookups="${ABSERVE_ARM_LOOKUPS:-a=linear b=bisect a2=linear}"
expect=""
for arm in ${ABSERVE_ARMS:-a b}; do
  mode=""
  for pair in $lookups; do
    if [ "${pair%%=*}" = "$arm" ]; then mode="${pair#*=}"; fi
  done
  case "$mode" in
    linear|bisect|hybrid) expect="$expect --expect $arm=$mode" ;;
    "") echo "run-report: arm '$arm' of ABSERVE_ARMS has no lookup in ABSERVE_ARM_LOOKUPS ($lookups)" >&2; exit 4 ;;
    *) echo "run-report: arm '$arm': unknown lookup '$mode' (linear, bisect or hybrid)" >&2; exit 4 ;;
  esac
done
# The load is done; the router may still be draining. Judge the run once the router has
# finished it (completed, or interrupted if it died), not while it is still being written.
python -m abserve.deploy.wait_run "$run_id" --db "$db" --timeout-s "${ABSERVE_REPORT_WAIT_S:-300}" || {
  rc=$?
  [ "$rc" = 1 ] || { echo "run-report: the run could not be read (exit $rc)" >&2; exit 4; }
  echo "run-report: the router did not finish the run in time; judging it as it is" >&2
}
# shellcheck disable=SC2086  # $expect is a list of words on purpose
abserve prove "$run_id" --db "$db" --telemetry-root "$root" $expect || {
  echo "run-report: the arms' proofs could not be recorded in the store (abserve prove exit $?)" >&2
  exit 4
}
# What each arm ran with (command line with --revision, the worker's determinism settings)
# and the model revision, from the same telemetry, into the run's provenance.
arm_options=""
for arm in ${ABSERVE_ARMS:-a b}; do arm_options="$arm_options --arm $arm"; done
# shellcheck disable=SC2086
python -m abserve.deploy.record_arms "$run_id" --db "$db" --telemetry-root "$root" $arm_options \
  --model "${ABSERVE_MODEL:-}" --revision "${ABSERVE_MODEL_REVISION:-}" || {
  echo "run-report: the arms' provenance could not be recorded (exit $?)" >&2
  exit 4
}
# How the load ended (docker/run-load.sh's exit code, each profile's summary): a load that
# stopped early makes the run invalid, with its reason in the report.
python -m abserve.deploy.record_load "$run_id" --db "$db" \
  --load-dir "${ABSERVE_LOAD_DIR:-$(dirname "$root")/load}" || {
  echo "run-report: the load's end could not be recorded (exit $?)" >&2
  exit 4
}
# Arms beyond a, b and a2 (compose's extra candidates): with two or more candidates the run is
# judged as `abserve run` judges it, every candidate against the baseline, Holm-corrected
# (abserve.deploy.compose_report: vs-<candidate>/ reports and the family's at the top of --out).
for arm in ${ABSERVE_ARMS:-a b}; do
  case "$arm" in a|b|a2) ;; *) exec python -m abserve.deploy.compose_report "$@" ;; esac
done
exec abserve report "$@"
