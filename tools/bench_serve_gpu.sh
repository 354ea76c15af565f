#!/usr/bin/env bash
# On the GPU machine: the server benchmark of docs/benchmarks.md ("dllm serve under load") on
# an SDAR-8B shape with random weights, next to the engine-only serving bench of the same work.
# Both: block diffusion, blocks of 4, one token per step (steps 4, static remasking, as
# `dllm bench --concurrency` runs it), prompts of 1024 tokens, 64 generated tokens each,
# concurrency 1, 8, 32, 128. The load generator is NVIDIA's aiperf when gpu-aiperf.tar.xz travelled
# next to the bundle (`scripts/make-gpu-pydeps.sh --aiperf`; the GPU machine reaches no registry),
# else tools/load_serve.py on the `openai` client (gpu-pydeps.tar.xz). Results under $OUT
# (default build/serve-gpu).
#   OUT=... SHAPE=configs/sdar-8b.json CONCURRENCY="1 8 32 128" tools/bench_serve_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/serve-gpu}
SHAPE=${SHAPE:-configs/sdar-8b.json}
CONCURRENCY=${CONCURRENCY:-1 8 32 128}
mkdir -p "$OUT"
# The prebuilt bundle (scripts/make-gpu-bundle.sh) when there is one, as scripts/gpu-check.sh.
[ -f gpu-bundle.tar.xz ] && [ ! -d gpu-bundle ] && tar xJf gpu-bundle.tar.xz
if [ -f gpu-pydeps.tar.xz ]; then
  [ -d gpu-pydeps ] || tar xJf gpu-pydeps.tar.xz
  export PYTHONPATH=$PWD/gpu-pydeps${PYTHONPATH:+:$PYTHONPATH}
fi
# The server's text side is the real Qwen3 tokenizer: it covers the SDAR shapes' vocabulary, so
# what random weights generate decodes to text (aiperf counts a response without text as an
# error; the embedded models' 4K-entry tokenizer left most ids without one).
QWEN3=tests/fixtures/tokenizers/qwen3
# aiperf when its packages travelled (scripts/make-gpu-pydeps.sh --aiperf), else the openai client.
LOADGEN=${LOADGEN:-openai}
if [ -f gpu-aiperf.tar.xz ]; then
  [ -d gpu-aiperf ] || tar xJf gpu-aiperf.tar.xz
  export PYTHONPATH=$PWD/gpu-aiperf${PYTHONPATH:+:$PYTHONPATH}
  LOADGEN=aiperf
fi
if [ -d gpu-bundle ]; then
  DLLM=$PWD/gpu-bundle/bin/dllm
  export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:${LD_LIBRARY_PATH:-}
  for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cu13/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
else
  DLLM=$PWD/build/dllm
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; } | tee "$OUT/machine.txt"
"$DLLM" bench --concurrency "$(echo $CONCURRENCY | tr ' ' ,)" --block 4 --shape "$SHAPE" \
  --prompt-length 1024 --max-tokens 64 --device cuda 2>&1 | tee "$OUT/engine_bench.txt"
DLLM=$DLLM LOADGEN=$LOADGEN AIPERF="python3 -m aiperf" PYTHON=python3 CONCURRENCY="$CONCURRENCY" ISL=1024 OSL=64 \
  EXTRA="block_length:4 steps:4 remasking:low_confidence_static" \
  TOKENIZER=$QWEN3 tools/bench_serve.sh "$OUT/server" -m "$QWEN3" --random-weights "$SHAPE" --device cuda
grep -E "^dllm_(forwards_total|forward_seconds_total|schedule_seconds_total|sequences_per_forward)" \
  "$OUT/server/metrics.txt" | tee "$OUT/server_engine_counters.txt"
