#!/usr/bin/env bash
# From a fresh machine: install dependencies, build, and run dllm's main job on the checked-in
# tiny SDAR checkpoint (random weights in the real on-disk format, so its "text" is noise until
# the embedded trained models land): describe it, then generate with block diffusion and with
# the autoregressive baseline, then show the chat/tokenizer path on the real Qwen3 tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
MODEL=tests/fixtures/models/sdar-tiny
QWEN3=tests/fixtures/tokenizers/qwen3
./build/dllm info "$MODEL"
echo "--- block diffusion (SDAR, block 4, threshold 0.9):"
./build/dllm generate -m "$MODEL" --prompt-ids 17,42,7,99,3,250,12 --max-tokens 16
echo "--- autoregressive baseline:"
./build/dllm generate -m "$MODEL" --prompt-ids 17,42,7,99,3,250,12 --max-tokens 16 --strategy ar
echo "--- chat template + tokenizer (Qwen3):"
printf '[{"role": "user", "content": "What is 2+3?"}]' > build/quickstart-messages.json
./build/dllm chat-template --tokenizer "$QWEN3" --messages build/quickstart-messages.json
./build/dllm tokenize --tokenizer "$QWEN3" --text "Diffusion language models decode many tokens per step."
