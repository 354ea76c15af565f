#!/usr/bin/env bash
# From a fresh machine: install dependencies, build, and run dllm on the checked-in tiny SDAR
# checkpoint (random weights; real on-disk format): describe it, then run one block-causal forward.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
MODEL=tests/fixtures/models/sdar-tiny
./build/dllm info "$MODEL"
./build/dllm forward -m "$MODEL" --ids 5,17,42,7,9,11,290,290 --attention block:4 --dump-logits build/quickstart-logits.npy
python3 - <<'PY' 2>/dev/null || echo "(logits written to build/quickstart-logits.npy)"
import numpy as np
x = np.load("build/quickstart-logits.npy")
print("logits", x.shape, "argmax per position:", x.argmax(-1).tolist())
PY
