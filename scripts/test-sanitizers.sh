#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, CUDA off,
# no benchmarks). CI runs it after scripts/test.sh. Any report fails the test that caused it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLLM_CUDA=OFF \
  -DDLLM_SANITIZE=address,undefined -DDLLM_BUILD_BENCH=OFF "$@" >/dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The long-context model's quality floors (4K-token needles through models/tiny-long: ~50 s each
# uninstrumented) run in the main suite only; the same decoders and sparse kernels run here on the
# small fixtures.
ctest --test-dir build-asan -LE cuda -E 'EmbeddedModel.*tiny_long' --output-on-failure -j"$(nproc)"
