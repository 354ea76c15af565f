#!/usr/bin/env bash
# Installs the build dependencies (if missing) and builds dllm into build/ (Release, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
