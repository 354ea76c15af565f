#!/usr/bin/env bash
# Builds the CUDA-enabled binaries here and packs them with the shared libraries the GPU machine
# lacks into gpu-bundle/ (ignored by git), to be carried to the GPU machine, which cannot install
# packages. scripts/gpu-check.sh uses the bundle when it finds one.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DDLLM_VIDEO=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build build-gpu -j"$(nproc)" --target dllm dllm_cuda_tests
rm -rf gpu-bundle && mkdir -p gpu-bundle/bin gpu-bundle/lib
cp build-gpu/dllm build-gpu/tests/dllm_cuda_tests gpu-bundle/bin/
strip gpu-bundle/bin/*  # the carried tree is size-limited
# Non-system, non-CUDA shared libraries (PCRE2, utf8proc, OpenMP, cpp-httplib and its brotli).
for lib in $(ldd gpu-bundle/bin/* | awk '/=>/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda*|libcublas*|libcudart*) ;;
    # On the GPU image already (its Python and torch need them), and 2.5 MB packed: cpp-httplib's
    # TLS and zlib, and the C++ runtime that only libcpp-httplib links dynamically.
    libssl.so*|libcrypto.so*|libz.so*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$lib" gpu-bundle/lib/ ;;
  esac
done
# The carried tree (tracked files + this) is limited to 64 MiB; the tracked files take ~108 MiB
# (2026-11-29), so a device call moves models/tiny-long (41 MB, the long-context model: carry it
# alone when a call needs it) and the 11 MB Qwen3 tokenizer fixture
# (tests/fixtures/tokenizers/qwen3/tokenizer.json, which no GPU test reads) out of the tree for the
# call and back afterwards.
XZ_OPT=-9e tar cJf gpu-bundle.tar.xz gpu-bundle
du -sh gpu-bundle gpu-bundle.tar.xz
