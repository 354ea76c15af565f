#!/usr/bin/env bash
# From a fresh machine: install dependencies, build, run the whole CPU test suite.
# GPU tests carry the ctest label `cuda` and run on the GPU machine (scripts/gpu-check.sh).
# The build includes the Python package (build/python, nanobind from the venv of
# scripts/python-env.sh) so that its tests run too; the plain build does not need Python. The
# venv gets every Python tool of the tests here, before ctest starts them in parallel (lm-eval's
# dependencies are not installed while another test imports from the same venv).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
python="$(./scripts/python-env.sh --eval)"
./scripts/build.sh -DDLLM_PYTHON=ON -DPython_EXECUTABLE="$python"
ctest --test-dir build -LE cuda --output-on-failure -j"$(nproc)"
