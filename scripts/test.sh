#!/usr/bin/env bash
# From a fresh machine: install dependencies, build, run the whole CPU test suite.
# GPU tests carry the ctest label `cuda` and run on the GPU machine (scripts/gpu-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build -LE cuda --output-on-failure -j"$(nproc)"
