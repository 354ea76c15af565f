#!/usr/bin/env bash
# dllm and llama.cpp's llama-diffusion-cli side by side on the same random LLaDA-architecture
# weights (issue 25's setting): full diffusion, 128 generated tokens, 32 steps, blocks of 32,
# greedy, prompts of 64 and 512 tokens, the same thread count; time per step and peak memory.
#
#   tools/llama_cpp/side_by_side.sh WORK_DIR [THREADS]
#
# PROMPTS="64" runs only the given prompt lengths. STEPS=8 runs 8 denoising steps instead of 32 (2 per block): full diffusion recomputes every row
# at every step, so the time per step does not depend on the step count, only the run's length.
# WORK_DIR receives everything: llama.cpp built from the llama-cpp-python source distribution on
# PyPI (it vendors llama.cpp: examples/diffusion and convert_hf_to_gguf.py with LLaDA), a Python
# site for the converter (transformers), the checkpoint (make_llada_checkpoint.py), its GGUF, and
# the logs. Needs: a built dllm (DLLM=path, default build-cpu/dllm), cmake, ninja, a C++ compiler,
# a Python with pip, numpy and torch (PYTHON=..., default python3), /usr/bin/time. Each step is
# skipped when its output exists, so a second run only times. DLLM_ARGS="--cpu-matmul bf16" passes
# options to dllm generate (the opt-in bf16 GEMM, backend/cpu/gemm_bf16.h).
set -euo pipefail
WORK=$(realpath -m "${1:?usage: side_by_side.sh WORK_DIR [THREADS]}")
THREADS=${2:-2}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DLLM=${DLLM:-$REPO/build-cpu/dllm}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
STEPS=${STEPS:-32}
mkdir -p "$WORK"
cd "$WORK"

# 1. llama.cpp from PyPI's source distribution, CPU only, tuned for this CPU (GGML_NATIVE).
if [ ! -x build/bin/llama-diffusion-cli ]; then
  if [ ! -d src ]; then
    # Without build isolation: pip would otherwise build the sdist's build requirements (cmake,
    # ninja) from source too, under --no-binary :all:, to read its metadata.
    "$PYTHON" -m pip install --quiet scikit-build-core
    "$PYTHON" -m pip download --no-binary :all: --no-deps --no-build-isolation llama-cpp-python \
      -d sdist
    mkdir -p src && tar xzf sdist/llama_cpp_python-*.tar.gz -C src --strip-components=1
  fi
  cmake -S src/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
  ninja -C build -j"$JOBS" llama-diffusion-cli
fi
LLAMA_SRC=$WORK/src/vendor/llama.cpp

# 2. The checkpoint (safetensors, bf16) and the same values as GGUF (bf16, no quantisation).
[ -f ckpt/model.safetensors ] || "$PYTHON" "$REPO/tools/llama_cpp/make_llada_checkpoint.py" ckpt
if [ ! -f llada.gguf ]; then
  [ -d pylib/transformers ] || "$PYTHON" -m pip install --target pylib transformers
  PYTHONPATH=$WORK/pylib "$PYTHON" "$LLAMA_SRC/convert_hf_to_gguf.py" ckpt --outtype bf16 \
    --outfile llada.gguf
fi

# 3. Prompts of N tokens: N common English words, each one token of Qwen's vocabulary with its
# leading space (dllm prints the count it tokenized; llama.cpp may add a BOS token).
prompt_of() {
  "$PYTHON" - "$1" <<'PY'
import sys
words = "the quick brown fox jumps over the lazy dog while a small model reads every line".split()
print(" ".join(words[i % len(words)] for i in range(int(sys.argv[1]))))
PY
}

echo "| prompt tokens | engine | time per step (s) | total (s) | peak RSS (GB) |"
echo "|---|---|---|---|---|"
for N in ${PROMPTS:-64 512}; do
  TEXT=$(prompt_of "$N")
  TOTAL=$((N + 128 + 8))
  # dllm: greedy full diffusion (LLaDA's low-confidence remasking), blocks of 32, 32 steps.
  # shellcheck disable=SC2086 # DLLM_ARGS: extra generate options, e.g. "--cpu-matmul bf16"
  /usr/bin/time -v "$DLLM" generate -m ckpt --device cpu --threads "$THREADS" ${DLLM_ARGS:-} \
    --strategy full -p "$TEXT" --max-tokens 128 --steps "$STEPS" --block-length 32 --format json \
    > "dllm-$N.json" 2> "dllm-$N.log"
  "$PYTHON" - "$N" "dllm-$N.json" "dllm-$N.log" <<'PY'
import json, re, sys
n, out, log = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3], errors="replace").read()
stats = out["stats"]
secs, steps = stats["seconds"], stats["forwards"]
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1)) / 1e6
print(f"| {n} ({stats['prompt_tokens']} tokens) | dllm | {secs / steps:.3f} | {secs:.2f} | {rss:.2f} |")
PY
  # llama-diffusion-cli cuts its whole canvas (prompt included) into blocks and runs the same
  # number of steps in each, so its step count must be a multiple of (N + 128) / 32; every step is
  # one forward over the whole canvas either way, as dllm's full diffusion.
  LLAMA_STEPS=$(((N + 128) / 32 * (STEPS / 4)))
  /usr/bin/time -v build/bin/llama-diffusion-cli -m llada.gguf -p "$TEXT" -t "$THREADS" \
    -tb "$THREADS" -c "$TOTAL" -b "$TOTAL" -ub "$((N + 128))" --diffusion-steps "$LLAMA_STEPS" \
    --diffusion-block-length 32 --temp 0 > "llama-$N.out" 2> "llama-$N.log" || true
  "$PYTHON" - "$N" "llama-$N.log" <<'PY'
import re, sys
n, log = sys.argv[1], open(sys.argv[2], errors="replace").read()
m = re.search(r"total time: ([\d.]+)ms, time per step: ([\d.]+)ms", log)
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1)) / 1e6
print(f"| {n} | llama.cpp | {float(m.group(2)) / 1e3:.3f} | {float(m.group(1)) / 1e3:.2f} | {rss:.2f} |")
PY
done
