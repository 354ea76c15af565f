#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent and non-interactive:
# packages already present are skipped, so a second run costs one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev   # the benchmarks' GEMM comparison (dllm's own CPU GEMM is gemm_f32)
  nlohmann-json3-dev       # config.json, safetensors headers, tokenizer.json
  libcli11-dev             # command line
  libpcre2-dev             # tokenizer pre-tokenizer regexes (look-ahead, \p{L})
  libutf8proc-dev          # Unicode NFC normalisation
  libcpp-httplib-dev       # dllm serve: HTTP/1.1 server (and the tests' client)
  libjpeg-dev libpng-dev libwebp-dev  # vision input: JPEG, PNG and WebP decoding (src/vision/)
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # vision input: video (FFmpeg)
  python3-venv python3-dev # the Python package and the Python tests' venv (scripts/python-env.sh)
  libgtest-dev libgmock-dev
  libbenchmark-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
