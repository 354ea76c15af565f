#!/usr/bin/env bash
# From a fresh machine: install dependencies, build, and run dllm's main job on the embedded
# default model models/tiny-block (a 6.6M-parameter SDAR-format block-diffusion model trained by
# tools/train/train.py): chat prompts whose answers can be checked, decoded by block diffusion
# and by the autoregressive baseline, then the other embedded models' decoders (LLaDA-format full
# diffusion, WeDLM streaming decoding). All on the CPU in a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./build/dllm info models/tiny-block

check() {  # check EXPECTED ARGS...: runs dllm generate, prints the answer and whether it is right
  local want=$1
  shift
  local got
  got=$(./build/dllm generate "$@")
  echo "$got"
  if [ "$got" = "$want" ]; then echo "  (correct: $want)"; else echo "  (expected: $want)"; fi
}
echo "--- block diffusion, the default model and strategy (tiny-block, blocks of 4):"
check 579 -p "What is 123 + 456?" --chat
check "3, 8, 12, 54, 59, 71, 97" -p "Sort in ascending order: 71, 59, 97, 54, 8, 12, 3" --chat
echo "--- autoregressive baseline on the same model:"
check 579 -p "What is 123 + 456?" --chat --strategy ar
echo "--- full diffusion (tiny-full, LLaDA format) and its d2Cache acceleration:"
check 579 -m models/tiny-full -p "What is 123 + 456?" --chat --max-tokens 32
check 579 -m models/tiny-full -p "What is 123 + 456?" --chat --max-tokens 32 --strategy d2cache
echo "--- WeDLM streaming parallel decoding (tiny-causal, WeDLM format):"
check 579 -m models/tiny-causal -p "What is 123 + 456?" --chat
echo "--- several requests at once through one engine (mixed strategies share each forward):"
cat > build/quickstart-requests.jsonl <<'JSONL'
{"messages": [{"role": "user", "content": "What is 123 + 456?"}], "max_tokens": 16}
{"messages": [{"role": "user", "content": "What is 602 + 416?"}], "max_tokens": 16, "strategy": "s2d2"}
{"messages": [{"role": "user", "content": "Sort in ascending order: 71, 59, 97, 54, 8, 12, 3"}], "max_tokens": 32}
{"messages": [{"role": "user", "content": "What is 775 + 677?"}], "max_tokens": 16, "strategy": "ar"}
JSONL
./build/dllm generate --requests build/quickstart-requests.jsonl
echo "--- a text prompt (prose continuation, sampled):"
./build/dllm generate -p "The old house at the end of the street" --max-tokens 40 --temperature 0.8 --top-p 0.95 --seed 1
