#!/usr/bin/env bash
# Load test of `dllm serve`: streamed requests of ISL prompt tokens and exactly OSL output tokens
# (ignore_eos) at each concurrency, then a table of output tokens/s, TTFT (first committed
# block), inter-block latency (one SSE chunk per committed block), inter-token latency and
# request latency, p50 / p99. The load generator:
#   LOADGEN=aiperf (default)  NVIDIA's aiperf from PyPI (scripts/python-env.sh --bench installs it
#                             into build/python-env, or AIPERF names an installed one, e.g.
#                             "python3 -m aiperf"): chat requests, prompts built with TOKENIZER
#   LOADGEN=openai            tools/load_serve.py: the `openai` client from PyPI driven by C
#                             asyncio clients in several processes: completions with ISL random
#                             token ids, PYTHON (python3) runs it
#
#   tools/bench_serve.sh OUT_DIR [dllm serve options...]
#
# Environment: CONCURRENCY ("1 8 32 128"), ISL (128), OSL (64), REQUESTS_PER_CLIENT (4; at least
# 16 requests per level), EXTRA (more request body keys, KEY:VALUE words, e.g.
# "block_length:4 steps:4 remasking:low_confidence_static"), TOKENIZER (models/tiny-block),
# DLLM (build/dllm).
# The server starts on a free port and stops (SIGTERM) at the end; its log is OUT_DIR/server.log.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: tools/bench_serve.sh OUT_DIR [dllm serve options...]}"
shift
mkdir -p "$out"
out="$(cd "$out" && pwd)"
loadgen="${LOADGEN:-aiperf}"
if [ "$loadgen" = aiperf ] && [ -n "${AIPERF:-}" ]; then
  # An aiperf that is already installed (the GPU machine: tools/bench_serve_gpu.sh), as words.
  python="${PYTHON:-python3}"
  read -r -a aiperf <<<"$AIPERF"
elif [ "$loadgen" = aiperf ]; then
  python="$(scripts/python-env.sh --bench)"
  aiperf=("$(dirname "$python")/aiperf")
else
  python="${PYTHON:-python3}"
fi
dllm="${DLLM:-build/dllm}"
tokenizer="$(cd "${TOKENIZER:-models/tiny-block}" && pwd)"

"$dllm" serve --port 0 --max-queued 1024 "$@" >"$out/server.out" 2>"$out/server.log" &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "listening on" "$out/server.out" 2>/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
  sleep 0.5
done
port="$(grep -o '127.0.0.1:[0-9]*' "$out/server.out" | cut -d: -f2)"
fetch() { "$python" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1"; }
model="$(fetch "http://127.0.0.1:$port/v1/models" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"
echo "server on port $port, model $model" >&2

if [ "$loadgen" != aiperf ]; then
  extra_json="$("$python" -c '
import json, sys
def value(v):
    try: return json.loads(v)
    except ValueError: return v
print(json.dumps({k: value(v) for k, v in (w.split(":", 1) for w in sys.argv[1:])}))' ${EXTRA:-})"
  "$python" tools/load_serve.py --url "http://127.0.0.1:$port" --model "$model" \
    --concurrency "$(echo ${CONCURRENCY:-1 8 32 128} | tr ' ' ,)" --isl "${ISL:-128}" \
    --osl "${OSL:-64}" --requests-per-client "${REQUESTS_PER_CLIENT:-4}" --extra "$extra_json" \
    --json "$out/load_serve.json" | tee "$out/summary.md"
  fetch "http://127.0.0.1:$port/metrics" >"$out/metrics.txt"
  exit 0
fi
extra=(--extra-inputs ignore_eos:true)
for kv in ${EXTRA:-}; do extra+=(--extra-inputs "$kv"); done
for c in ${CONCURRENCY:-1 8 32 128}; do
  n=$((c * ${REQUESTS_PER_CLIENT:-4}))
  [ "$n" -lt 16 ] && n=16
  echo "== concurrency $c: $n requests" >&2
  (cd "$out" && "${aiperf[@]}" profile --model "$model" --url "http://127.0.0.1:$port" \
     --endpoint-type chat --streaming --tokenizer "$tokenizer" \
     --concurrency "$c" --request-count "$n" --warmup-request-count "$c" \
     --prompt-input-tokens-mean "${ISL:-128}" --prompt-input-tokens-stddev 0 \
     --prompt-output-tokens-mean "${OSL:-64}" --prompt-output-tokens-stddev 0 \
     --use-server-token-count --random-seed 1 "${extra[@]}" \
     --output-artifact-dir "$out/c$c" >"$out/c$c.log" 2>&1) ||
    { tail -30 "$out/c$c.log" >&2; exit 1; }
done
fetch "http://127.0.0.1:$port/metrics" >"$out/metrics.txt"
"$python" tools/aiperf_summary.py "$out" | tee "$out/summary.md"
